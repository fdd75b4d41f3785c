// The groupquant custom ops: schemas, argument checks, output allocation, CPU registration.
//
//   groupquant::group_fake_quant(x, params, bool want_mask, bool want_scale, tensor_scale)
//       -> (Tensor out, Tensor mask, Tensor scale)   (mask / scale: empty unless asked for)
//   groupquant::group_quantize(x, params, ScalarType code_dtype, tensor_scale) -> (Tensor codes, Tensor scale, Tensor scale_codes)
//   groupquant::tensor_scale(x, params) -> Tensor   (g of two-level scaling: float32, 0-d)
//   groupquant::kernel_param_fields() -> str   (the field names of params, comma-separated)
//
// `params` (int[]) is the packed parameter record: field list in group_quant_params.h, packed from
// ops/kernel_params.py. `tensor_scale` (Tensor?, default None) is the per-tensor second scale g of
// two-level scaling: a float32 tensor of one element on x's device, given exactly when params say
// tensor_scale (op groupquant::tensor_scale computes it, as ops/shared_scale.tensor_scale_of
// defines it). Fake (meta) kernels are
// registered from Python (ops/native_ops.py), autograd in autograd.cpp.
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "group_quant_ops.h"

namespace groupquant {
namespace {

// A number as text for an error message, without iostreams: with some torch builds, streaming an
// integer, float or bool into TORCH_CHECK's message from an extension crashes (a libstdc++ locale
// mismatch: torch 2.11 + CUDA 13 ended the process on a bad scale_kind). Every TORCH_CHECK in csrc/
// passes only string literals, C strings, std::string from num() and torch's own types
// (tests/csrc/test_check_messages.py reads the sources and holds them to that).
std::string num(int64_t v) { return std::to_string(v); }
std::string num(int32_t v) { return std::to_string(v); }
std::string num(float v) { return std::to_string(v); }
std::string num(bool v) { return v ? "true" : "false"; }

// Checks the format fields (already unpacked into f), then fills the derived constants.
void make_format_params(FormatParams& f) {
  TORCH_CHECK_VALUE(f.exp_max >= -127 - 126 && f.exp_max <= kE8M0MaxExp,
                    "groupquant: exp_max must be at most 127, got ", num(f.exp_max));
  TORCH_CHECK_VALUE(std::isfinite(f.max_normal) && f.max_normal > 0.0f,
                    "groupquant: max_normal must be a positive finite float32 value, got ", num(f.max_normal));
  TORCH_CHECK_VALUE(f.emax >= -126 && f.emax <= 126, "groupquant: emax must be in [-126, 126], got ", num(f.emax));
  TORCH_CHECK_VALUE(f.even_bits >= 0 && f.even_bits <= 100, "groupquant: even_bits must be in [0, 100], got ",
                    num(f.even_bits));
  if (f.is_float) {
    TORCH_CHECK_VALUE(f.exponent_bits >= 1 && f.mantissa_bits >= 0 && f.exponent_bits + f.mantissa_bits <= 16,
                      "groupquant: a float format needs exponent_bits >= 1, mantissa_bits >= 0 and at most "
                      "16 bits, got e", num(f.exponent_bits), "m", num(f.mantissa_bits));
    TORCH_CHECK_VALUE(f.emin == 1 - f.bias, "groupquant: emin must be 1 - bias, got emin=", num(f.emin), " bias=",
                      num(f.bias));
    TORCH_CHECK_VALUE(f.emin - f.mantissa_bits >= -120 && f.emax <= 120,
                      "groupquant: format range must lie inside 2^-120 .. 2^120, got emin=", num(f.emin),
                      " emax=", num(f.emax));
    TORCH_CHECK_VALUE(f.max_normal < exp2i(f.emax + 1), "groupquant: a float format's max_normal must lie below "
                      "2^(emax + 1), got max_normal=", num(f.max_normal), " emax=", num(f.emax));
    TORCH_CHECK_VALUE(f.special >= kSpecialNone && f.special <= kSpecialFnuz,
                      "groupquant: special must be 0 (none), 1 (ieee), 2 (nan_only) or 3 (fnuz), got ", num(f.special));
    TORCH_CHECK_VALUE(f.nan_code >= -1 && f.nan_code < (1 << 17),
                      "groupquant: nan_code must be -1 (none) or a code, got ", num(f.nan_code));
  } else {
    TORCH_CHECK_VALUE(f.frac_bits >= 0 && f.frac_bits <= 24, "groupquant: frac_bits must be in [0, 24], got ",
                      num(f.frac_bits));
    TORCH_CHECK_VALUE(f.qmin <= f.qmax && f.qmin >= -(1 << 16) && f.qmax < (1 << 16),
                      "groupquant: need -2^16 <= qmin <= qmax < 2^16, got ", num(f.qmin), ", ", num(f.qmax));
  }
  TORCH_CHECK_VALUE(f.saturating || (f.is_float && f.special != kSpecialNone),
                    "groupquant: saturating=false needs a float format with Inf or NaN codes");
  TORCH_CHECK_VALUE(f.scale_kind >= 0 && f.scale_kind < kNumScaleKinds, "groupquant: scale_kind must be 0..",
                    num(kNumScaleKinds - 1), " (", kScaleKindNames, "), got ", num(f.scale_kind));
  const char* scale_error = scale_fields_error(f);
  TORCH_CHECK_VALUE(scale_error == nullptr, "groupquant: ", scale_error, " (scale_kind ", num(f.scale_kind),
                    ", scale_bias ", num(f.scale_bias), ", exp_max ", num(f.exp_max), ", scale_nan_code ",
                    num(f.scale_nan_code), ", scale_mantissa_bits ", num(f.scale_mantissa_bits), ", scale_min ",
                    num(f.scale_min), ", scale_max ", num(f.scale_max), ", tensor_scale ", num(f.tensor_scale), ")");
  derive_format_constants(f);
}

int32_t dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kFloat32;
    case at::kBFloat16: return kBFloat16;
    case at::kHalf: return kFloat16;
    default:
      TORCH_CHECK_TYPE(false, "groupquant: x must be float32, bfloat16 or float16, got ", t);
  }
  return kFloat32;
}

int32_t code_type(at::ScalarType t) {
  switch (t) {
    case at::kByte: return kCodeUInt8;
    case at::kChar: return kCodeInt8;
    case at::kShort: return kCodeInt16;
    case at::kInt: return kCodeInt32;
    default:
      TORCH_CHECK_TYPE(false, "groupquant: code_dtype must be uint8, int8, int16 or int32, got ", t);
  }
  return kCodeUInt8;
}

// The record's call and format fields, each in its type's range (the format's own checks follow in
// make_format_params).
void unpack_record(at::IntArrayRef params, CallParams* call, FormatParams* f) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(params.size()) == kNumParams, "groupquant: params must hold ", num(kNumParams),
                    " values (", kParamFieldNames, "), got ", num(static_cast<int64_t>(params.size())));
  const char* bad = unpack_params(params.data(), call, f);
  TORCH_CHECK_VALUE(bad == nullptr, "groupquant: params field ", bad, " is out of range for its type");
}

// The job for x (made contiguous by the caller) with every numeric setting; outputs left null.
// A block size of at least the dim's size is the whole dim (one block).
Job make_job(const at::Tensor& x, at::IntArrayRef params, const std::optional<at::Tensor>& tensor_scale) {
  CallParams call{};
  Job job;
  unpack_record(params, &call, &job.fmt);
  const int64_t nd = x.dim();
  TORCH_CHECK_VALUE(nd >= 1, "groupquant: cannot group a 0-d tensor");
  TORCH_CHECK_VALUE(call.dim >= -nd && call.dim < nd, "groupquant: dim=", num(call.dim), " is out of range for a ",
                    num(nd), "-d tensor");
  TORCH_CHECK_VALUE(call.block_size >= 1, "groupquant: block_size must be >= 1, got ", num(call.block_size));
  TORCH_CHECK_VALUE(call.scale_mode >= kScaleFloor && call.scale_mode <= kScaleFloat,
                    "groupquant: scale_mode must be 0..4 (floor, ceil, even, rceil, float), got ",
                    num(call.scale_mode));
  TORCH_CHECK_VALUE(call.rounding >= kRoundEven && call.rounding <= kRoundStochastic,
                    "groupquant: rounding must be 0..3 (even, nearest, floor, stochastic), got ", num(call.rounding));
  make_format_params(job.fmt);
  const int64_t d = call.dim < 0 ? call.dim + nd : call.dim;
  job.dim = d;
  job.x = x.data_ptr();
  job.dtype = dtype_code(x.scalar_type());
  job.outer = 1;
  for (int64_t i = 0; i < d; ++i) job.outer *= x.size(i);
  job.dim_size = x.size(d);
  job.inner = 1;
  for (int64_t i = d + 1; i < nd; ++i) job.inner *= x.size(i);
  job.block_size = std::min(call.block_size, std::max<int64_t>(job.dim_size, 1));
  job.num_blocks = job.dim_size == 0 ? 0 : (job.dim_size - 1) / job.block_size + 1;
  job.scale_mode = call.scale_mode;
  job.rounding = call.rounding;
  job.seed = call.seed;
  TORCH_CHECK_VALUE((call.scale_mode == kScaleFloat) != scale_kind_is_power_of_two(job.fmt.scale_kind),
                    "groupquant: scale_mode float goes with float-valued scale formats, the power-of-two modes "
                    "with exponent scale formats");
  const bool has_ts = tensor_scale.has_value() && tensor_scale->defined();
  TORCH_CHECK_VALUE(has_ts == job.fmt.tensor_scale, "groupquant: tensor_scale must be given exactly when params "
                    "ask for a per-tensor scale");
  if (has_ts) {
    const at::Tensor& ts = *tensor_scale;
    TORCH_CHECK_TYPE(ts.scalar_type() == at::kFloat && ts.numel() == 1,
                     "groupquant: tensor_scale must be a float32 tensor of one element");
    TORCH_CHECK_VALUE(ts.device() == x.device(), "groupquant: tensor_scale must be on x's device");
    job.tensor_scale = ts.data_ptr<float>();
    if (ts.device().is_cpu()) job.tensor_scale_host = *job.tensor_scale;
  }
  return job;
}

// sizes[:d] + (k, middle) + sizes[d+1:], d = job.dim
std::vector<int64_t> grouped_shape(const at::Tensor& x, const Job& job, int64_t middle) {
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < job.dim; ++i) shape.push_back(x.size(i));
  shape.push_back(job.num_blocks);
  shape.push_back(middle);
  for (int64_t i = job.dim + 1; i < x.dim(); ++i) shape.push_back(x.size(i));
  return shape;
}

}  // namespace

// Dequantized values, the mask (empty unless want_mask) and, if want_scale, the float32 scale of
// every block in the contracted scale shape sizes[:d] + (k, 1) + sizes[d+1:] (else empty).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fake_quant_impl(const at::Tensor& x, at::IntArrayRef params,
                                                               bool want_mask, bool want_scale,
                                                               const std::optional<at::Tensor>& tensor_scale,
                                                               Runner runner) {
  dtype_code(x.scalar_type());
  const at::Tensor xc = x.contiguous();
  const std::optional<at::Tensor> ts =
      tensor_scale.has_value() && tensor_scale->defined() ? std::optional<at::Tensor>(tensor_scale->contiguous())
                                                          : std::nullopt;
  Job job = make_job(xc, params, ts);
  const auto bool_opts = xc.options().dtype(at::kBool);
  const auto float_opts = xc.options().dtype(at::kFloat);
  at::Tensor out = at::empty(xc.sizes(), xc.options());
  at::Tensor mask = want_mask ? at::empty(xc.sizes(), bool_opts) : at::empty({0}, bool_opts);
  at::Tensor scale = want_scale ? at::empty(grouped_shape(xc, job, 1), float_opts) : at::empty({0}, float_opts);
  job.out = out.data_ptr();
  job.mask = want_mask ? reinterpret_cast<uint8_t*>(mask.data_ptr<bool>()) : nullptr;
  job.scale = want_scale ? scale.data_ptr<float>() : nullptr;
  if (xc.numel() > 0) runner(job, xc);
  return {out, mask, scale};
}

at::Tensor tensor_scale_impl(const at::Tensor& x, at::IntArrayRef params, TensorScaleRunner runner) {
  const int32_t dtype = dtype_code(x.scalar_type());
  CallParams call{};
  FormatParams f{};
  unpack_record(params, &call, &f);
  make_format_params(f);
  TORCH_CHECK_VALUE(f.tensor_scale, "groupquant: tensor_scale needs params that ask for a per-tensor scale "
                    "(tensor_scale true)");
  const double divisor = static_cast<double>(f.scale_max) * static_cast<double>(f.max_normal);
  TORCH_CHECK_VALUE(static_cast<double>(static_cast<float>(divisor)) == divisor,
                    "groupquant: the tensor scale's divisor scale_max * max_normal must be exact in float32, got ",
                    num(f.scale_max), " * ", num(f.max_normal));
  const auto float_opts = x.options().dtype(at::kFloat);
  if (x.numel() == 0) return at::ones({}, float_opts);
  const auto [lo, hi] = at::aminmax(x);
  at::Tensor g = at::empty({}, float_opts);
  TensorScaleJob job;
  job.lo = lo.data_ptr();
  job.hi = hi.data_ptr();
  job.dtype = dtype;
  job.divisor = static_cast<float>(divisor);
  job.g = g.data_ptr<float>();
  runner(job, x);
  return g;
}

namespace {

void run_on_cpu(const Job& job, const at::Tensor&) { run_cpu(job); }

void tensor_scale_on_cpu(const TensorScaleJob& job, const at::Tensor&) { run_tensor_scale(job); }

at::Tensor tensor_scale_cpu(const at::Tensor& x, at::IntArrayRef params) {
  return tensor_scale_impl(x, params, tensor_scale_on_cpu);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fake_quant_cpu(const at::Tensor& x, at::IntArrayRef params,
                                                              bool want_mask, bool want_scale,
                                                              const std::optional<at::Tensor>& ts) {
  return fake_quant_impl(x, params, want_mask, want_scale, ts, run_on_cpu);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_cpu(const at::Tensor& x, at::IntArrayRef params,
                                                            at::ScalarType code_dtype,
                                                            const std::optional<at::Tensor>& ts) {
  return quantize_impl(x, params, code_dtype, ts, run_on_cpu);
}

// The names of the params fields in packed order, comma-separated (Python checks them at load).
std::string kernel_param_fields() {
  std::string names(kParamFieldNames);
  if (!names.empty() && names.back() == ',') names.pop_back();
  return names;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_impl(const at::Tensor& x, at::IntArrayRef params,
                                                             at::ScalarType code_dtype,
                                                             const std::optional<at::Tensor>& tensor_scale,
                                                             Runner runner) {
  dtype_code(x.scalar_type());
  const at::Tensor xc = x.contiguous();
  const std::optional<at::Tensor> ts =
      tensor_scale.has_value() && tensor_scale->defined() ? std::optional<at::Tensor>(tensor_scale->contiguous())
                                                          : std::nullopt;
  Job job = make_job(xc, params, ts);
  job.code_type = code_type(code_dtype);
  at::Tensor codes = at::empty(grouped_shape(xc, job, job.block_size), xc.options().dtype(code_dtype));
  const std::vector<int64_t> scale_shape = grouped_shape(xc, job, 1);
  at::Tensor scale = at::empty(scale_shape, xc.options().dtype(at::kFloat));
  at::Tensor scale_codes = at::empty(scale_shape, xc.options().dtype(at::kByte));
  job.codes = codes.data_ptr();
  job.scale = scale.data_ptr<float>();
  job.scale_codes = scale_codes.data_ptr<uint8_t>();
  if (codes.numel() > 0) runner(job, xc);
  return {codes, scale, scale_codes};
}

}  // namespace groupquant

TORCH_LIBRARY(groupquant, m) {
  m.def("group_fake_quant(Tensor x, int[] params, bool want_mask, bool want_scale, Tensor? tensor_scale=None) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("group_quantize(Tensor x, int[] params, ScalarType code_dtype, Tensor? tensor_scale=None) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("tensor_scale(Tensor x, int[] params) -> Tensor");
  m.def("kernel_param_fields() -> str", &groupquant::kernel_param_fields);
}

TORCH_LIBRARY_IMPL(groupquant, CPU, m) {
  m.impl("group_fake_quant", &groupquant::fake_quant_cpu);
  m.impl("group_quantize", &groupquant::quantize_cpu);
  m.impl("tensor_scale", &groupquant::tensor_scale_cpu);
}
