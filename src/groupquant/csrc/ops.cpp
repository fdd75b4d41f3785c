// The groupquant custom ops: schemas, argument checks, output allocation, CPU registration.
//
//   groupquant::group_fake_quant(x, <args>) -> Tensor
//   groupquant::group_fake_quant_masked(x, <args>) -> (Tensor out, Tensor mask)
//   groupquant::group_quantize(x, <args>, ScalarType code_dtype) -> (Tensor codes, Tensor scale, Tensor scale_codes)
//
// Fake (meta) kernels and autograd are registered from Python (ops/native_ops.py).
#include <torch/library.h>

#include <cmath>
#include <string>
#include <vector>

#include "group_quant_ops.h"

namespace groupquant {
namespace {

#define GQ_SCHEMA_ARGS                                                                        \
  "Tensor x, int dim, int block_size, bool is_float, bool is_signed, int exponent_bits, "     \
  "int mantissa_bits, int bias, int emin, int emax, float max_normal, int qmin, int qmax, "   \
  "int frac_bits, int special, int nan_code, int even_bits, bool negative_zero, int exp_max, "          \
  "str scale_mode, str rounding, int seed"

// (compared as std::string: c10::string_view differs across torch versions)
int32_t parse_scale_mode(c10::string_view view) {
  const std::string s(view.data(), view.size());
  if (s == "floor") return kScaleFloor;
  if (s == "ceil") return kScaleCeil;
  if (s == "even") return kScaleEven;
  if (s == "rceil") return kScaleRceil;
  if (s == "float") return kScaleFloat;
  TORCH_CHECK_VALUE(false, "groupquant: scale_mode must be one of floor, ceil, even, rceil, float; got '", s, "'");
  return kScaleFloor;
}

int32_t parse_rounding(c10::string_view view) {
  const std::string s(view.data(), view.size());
  if (s == "even") return kRoundEven;
  if (s == "nearest") return kRoundNearest;
  if (s == "floor") return kRoundFloor;
  if (s == "stochastic") return kRoundStochastic;
  TORCH_CHECK_VALUE(false, "groupquant: rounding must be one of even, nearest, floor, stochastic; got '", s,
                    "'");
  return kRoundEven;
}

// Checks the format arguments and fills the derived constants.
FormatParams make_format_params(bool is_float, bool is_signed, int64_t exponent_bits, int64_t mantissa_bits,
                                int64_t bias, int64_t emin, int64_t emax, double max_normal, int64_t qmin,
                                int64_t qmax, int64_t frac_bits, int64_t special, int64_t nan_code,
                                int64_t even_bits, bool negative_zero, int64_t exp_max) {
  TORCH_CHECK_VALUE(exp_max >= -127 - 126 && exp_max <= kE8M0MaxExp, "groupquant: exp_max must be at most 127, got ",
                    exp_max);
  TORCH_CHECK_VALUE(std::isfinite(max_normal) && max_normal > 0.0 &&
                        static_cast<double>(static_cast<float>(max_normal)) == max_normal,
                    "groupquant: max_normal must be a positive float32 value, got ", max_normal);
  TORCH_CHECK_VALUE(emax >= -126 && emax <= 126, "groupquant: emax must be in [-126, 126], got ", emax);
  TORCH_CHECK_VALUE(even_bits >= 0 && even_bits <= 100, "groupquant: even_bits must be in [0, 100], got ",
                    even_bits);
  if (is_float) {
    TORCH_CHECK_VALUE(exponent_bits >= 1 && mantissa_bits >= 0 && exponent_bits + mantissa_bits <= 16,
                      "groupquant: a float format needs exponent_bits >= 1, mantissa_bits >= 0 and at most "
                      "16 bits, got e", exponent_bits, "m", mantissa_bits);
    TORCH_CHECK_VALUE(emin == 1 - bias, "groupquant: emin must be 1 - bias, got emin=", emin, " bias=", bias);
    TORCH_CHECK_VALUE(emin - mantissa_bits >= -120 && emax <= 120,
                      "groupquant: format range must lie inside 2^-120 .. 2^120, got emin=", emin, " emax=", emax);
    TORCH_CHECK_VALUE(special >= kSpecialNone && special <= kSpecialFnuz,
                      "groupquant: special must be 0 (none), 1 (ieee), 2 (nan_only) or 3 (fnuz), got ", special);
    TORCH_CHECK_VALUE(nan_code >= -1 && nan_code < (int64_t{1} << 17),
                      "groupquant: nan_code must be -1 (none) or a code, got ", nan_code);
  } else {
    TORCH_CHECK_VALUE(frac_bits >= 0 && frac_bits <= 24, "groupquant: frac_bits must be in [0, 24], got ",
                      frac_bits);
    TORCH_CHECK_VALUE(qmin <= qmax && qmin >= -(int64_t{1} << 16) && qmax < (int64_t{1} << 16),
                      "groupquant: need -2^16 <= qmin <= qmax < 2^16, got ", qmin, ", ", qmax);
  }
  FormatParams f{};
  f.is_float = is_float;
  f.is_signed = is_signed;
  f.exponent_bits = static_cast<int32_t>(exponent_bits);
  f.mantissa_bits = static_cast<int32_t>(mantissa_bits);
  f.bias = static_cast<int32_t>(bias);
  f.emin = static_cast<int32_t>(emin);
  f.emax = static_cast<int32_t>(emax);
  f.max_normal = static_cast<float>(max_normal);
  f.qmin = static_cast<int32_t>(qmin);
  f.qmax = static_cast<int32_t>(qmax);
  f.frac_bits = static_cast<int32_t>(frac_bits);
  f.special = static_cast<int32_t>(special);
  f.nan_code = static_cast<int32_t>(nan_code);
  f.even_bits = static_cast<int32_t>(even_bits);
  f.negative_zero = negative_zero;
  f.exp_max = static_cast<int32_t>(exp_max);
  if (is_float) {
    f.qemin = f.emin;
    f.qmant = f.mantissa_bits;
    f.low = is_signed ? -f.max_normal : 0.0f;
    f.high = f.max_normal;
    f.min_normal = exp2i(f.emin);
  } else {
    f.qemin = 127;  // pins the quantum to 2^-frac_bits
    f.qmant = 127 + f.frac_bits;
    f.low = static_cast<float>(qmin) * exp2i(-f.frac_bits);
    f.high = static_cast<float>(qmax) * exp2i(-f.frac_bits);
    f.min_normal = 0.0f;
  }
  f.int_up = exp2i(f.frac_bits);
  int e = 0;
  const double m = std::frexp(max_normal, &e);
  f.rceil_sig = static_cast<float>(2.0 * m);
  f.rceil_shift = e - 1;
  return f;
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

// The job for x (made contiguous by the caller) with every numeric setting; outputs left null.
Job make_job(GQ_OP_PARAMS) {
  const int64_t nd = x.dim();
  TORCH_CHECK_VALUE(nd >= 1, "groupquant: cannot group a 0-d tensor");
  TORCH_CHECK_VALUE(dim >= -nd && dim < nd, "groupquant: dim=", dim, " is out of range for a ", nd, "-d tensor");
  TORCH_CHECK_VALUE(block_size >= 1, "groupquant: block_size must be >= 1, got ", block_size);
  const int64_t d = dim < 0 ? dim + nd : dim;
  Job job;
  job.x = x.data_ptr();
  job.dtype = dtype_code(x.scalar_type());
  job.outer = 1;
  for (int64_t i = 0; i < d; ++i) job.outer *= x.size(i);
  job.dim_size = x.size(d);
  job.inner = 1;
  for (int64_t i = d + 1; i < nd; ++i) job.inner *= x.size(i);
  job.block_size = block_size;
  job.num_blocks = (job.dim_size + block_size - 1) / block_size;
  job.fmt = make_format_params(is_float, is_signed, exponent_bits, mantissa_bits, bias, emin, emax, max_normal, qmin,
                               qmax, frac_bits, special, nan_code, even_bits, negative_zero, exp_max);
  job.scale_mode = parse_scale_mode(scale_mode);
  job.rounding = parse_rounding(rounding);
  job.seed = static_cast<uint32_t>(static_cast<uint64_t>(seed) & 0xFFFFFFFFu);
  return job;
}

// sizes[:d] + (k, middle) + sizes[d+1:]
std::vector<int64_t> grouped_shape(const at::Tensor& x, int64_t dim, int64_t k, int64_t middle) {
  const int64_t nd = x.dim();
  const int64_t d = dim < 0 ? dim + nd : dim;
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < d; ++i) shape.push_back(x.size(i));
  shape.push_back(k);
  shape.push_back(middle);
  for (int64_t i = d + 1; i < nd; ++i) shape.push_back(x.size(i));
  return shape;
}

void run_on_cpu(const Job& job, const at::Tensor&) { run_cpu(job); }

at::Tensor fake_quant_cpu(GQ_OP_PARAMS) { return std::get<0>(fake_quant_impl(GQ_OP_ARGS, false, run_on_cpu)); }

std::tuple<at::Tensor, at::Tensor> fake_quant_masked_cpu(GQ_OP_PARAMS) {
  return fake_quant_impl(GQ_OP_ARGS, true, run_on_cpu);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_cpu(GQ_OP_PARAMS, at::ScalarType code_dtype) {
  return quantize_impl(GQ_OP_ARGS, code_dtype, run_on_cpu);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fake_quant_impl(GQ_OP_PARAMS, bool want_mask, Runner runner) {
  dtype_code(x.scalar_type());
  const at::Tensor xc = x.contiguous();
  Job job = make_job(xc, dim, block_size, is_float, is_signed, exponent_bits, mantissa_bits, bias, emin, emax,
                     max_normal, qmin, qmax, frac_bits, special, nan_code, even_bits, negative_zero, exp_max, scale_mode,
                     rounding, seed);
  at::Tensor out = at::empty(xc.sizes(), xc.options());
  at::Tensor mask = want_mask ? at::empty(xc.sizes(), xc.options().dtype(at::kBool)) : at::empty({0}, xc.options().dtype(at::kBool));
  job.out = out.data_ptr();
  job.mask = want_mask ? reinterpret_cast<uint8_t*>(mask.data_ptr<bool>()) : nullptr;
  if (xc.numel() > 0) runner(job, xc);
  return {out, mask};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_impl(GQ_OP_PARAMS, at::ScalarType code_dtype, Runner runner) {
  dtype_code(x.scalar_type());
  const at::Tensor xc = x.contiguous();
  Job job = make_job(xc, dim, block_size, is_float, is_signed, exponent_bits, mantissa_bits, bias, emin, emax,
                     max_normal, qmin, qmax, frac_bits, special, nan_code, even_bits, negative_zero, exp_max, scale_mode,
                     rounding, seed);
  job.code_type = code_type(code_dtype);
  at::Tensor codes = at::empty(grouped_shape(xc, dim, job.num_blocks, block_size), xc.options().dtype(code_dtype));
  const std::vector<int64_t> scale_shape = grouped_shape(xc, dim, job.num_blocks, 1);
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
  m.def("group_fake_quant(" GQ_SCHEMA_ARGS ") -> Tensor");
  m.def("group_fake_quant_masked(" GQ_SCHEMA_ARGS ") -> (Tensor, Tensor)");
  m.def("group_quantize(" GQ_SCHEMA_ARGS ", ScalarType code_dtype) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(groupquant, CPU, m) {
  m.impl("group_fake_quant", &groupquant::fake_quant_cpu);
  m.impl("group_fake_quant_masked", &groupquant::fake_quant_masked_cpu);
  m.impl("group_quantize", &groupquant::quantize_cpu);
}
