// The packed-weight GEMM ops: schemas, argument checks, CPU registration.
//
//   groupquant::packed_linear(x, data, scale, value_table, scale_table, bias?, params) -> Tensor
//       x [M, K] float32 / bfloat16 / float16 -> [M, N] in x's dtype (float32 accumulation)
//   groupquant::packed_decode(data, scale, value_table, scale_table, params) -> Tensor
//       the decoded weight [N, K], float32 (what the kernels multiply by; for tests and checks)
//   groupquant::packed_gemm_param_fields() -> str   (field names of params, comma-separated)
//   groupquant::packed_cpu_paths() -> str            (the CPU paths this host has, best first)
//   groupquant::packed_cpu_path() -> str             (the path the CPU kernels take now)
//   groupquant::packed_set_cpu_path(str path) -> str (sets it; an error if the host lacks it)
//   groupquant::packed_cpu_last_kernel() -> str      (the CPU kernel of this thread's last packed_linear)
//   groupquant::packed_cpu_kernel_table() -> str     (the kernel selection table, markdown rows)
//   groupquant::packed_worker_rule(int[] signals) -> int  (the worker rule on hand-made numbers)
//
// `params` is the packed record of ops/packed_gemm_params.py (field list in packed_gemm.h).
#include <torch/library.h>

#include <string>

#include "packed_gemm_cpu.h"
#include "packed_gemm_cpu_path.h"
#include "packed_gemm_ops.h"
#include "packed_gemm_select.h"
#include "packed_gemm_worker_rule.h"

namespace groupquant {
namespace packed {

namespace {
// Numbers and shapes as text for error messages (no iostreams: see num in ops.cpp).
std::string num(int64_t v) { return std::to_string(v); }
std::string shape_text(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + num(sizes[i]);
  return s + "]";
}
}  // namespace

PackedGemmParams parse_packed_params(at::IntArrayRef params) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(params.size()) == kNumPackedParams, "groupquant: packed-GEMM params must hold ",
                    num(kNumPackedParams), " values (", kPackedFieldNames, "), got ", num(params.size()));
  PackedGemmParams p{};
  const char* bad = unpack_packed_params(params.data(), &p);
  TORCH_CHECK_VALUE(bad == nullptr, "groupquant: packed-GEMM params field ", bad, " is out of range for its type");
  TORCH_CHECK_VALUE(p.in_features >= 1 && p.out_features >= 0, "groupquant: packed GEMM needs in_features >= 1 and "
                    "out_features >= 0, got ", num(p.in_features), ", ", num(p.out_features));
  TORCH_CHECK_VALUE(p.block_size >= 1 && p.num_blocks == (p.in_features + p.block_size - 1) / p.block_size,
                    "groupquant: num_blocks must be ceil(in_features / block_size), got block_size=",
                    num(p.block_size), " num_blocks=", num(p.num_blocks));
  TORCH_CHECK_VALUE(p.code_bits >= 1 && p.code_bits <= 8, "groupquant: packed GEMM takes codes of 1 to 8 bits, got "
                    "code_bits=", num(p.code_bits));
  TORCH_CHECK_VALUE(p.block_size * p.code_bits % 8 == 0, "groupquant: a block of packed codes must fill whole bytes "
                    "(block_size * code_bits % 8 == 0), got block_size=", num(p.block_size), " code_bits=",
                    num(p.code_bits));
  TORCH_CHECK_VALUE(p.decode_path >= kDecodeTable && p.decode_path <= kDecodeNibbleBf16,
                    "groupquant: decode_path must be 0..4, got ", num(p.decode_path));
  TORCH_CHECK_VALUE((p.decode_path != kDecodeTable16 && p.decode_path != kDecodeNibbleBf16) || p.code_bits == 4,
                    "groupquant: decode_path table16 / nibble_bf16 needs 4-bit codes");
  TORCH_CHECK_VALUE((p.decode_path != kDecodeInt8 && p.decode_path != kDecodeHalf) || p.code_bits == 8,
                    "groupquant: decode_path int8/half needs 8-bit codes");
  TORCH_CHECK_VALUE(p.half_shift >= 0 && p.half_shift <= 8 && p.nan_low7 >= -1 && p.nan_low7 <= 0x7F,
                    "groupquant: half_shift must be in 0..8 and nan_low7 in -1..127");
  return p;
}

PackedGemmJob make_weight_job(const PackedGemmParams& p, const at::Tensor& data, const at::Tensor& scale,
                              const at::Tensor& value_table, const at::Tensor& scale_table,
                              const c10::optional<at::Tensor>& bias) {
  const int64_t nbytes = p.out_features * row_bytes(p);
  TORCH_CHECK_TYPE(data.scalar_type() == at::kByte && data.is_contiguous(), "groupquant: packed data must be a "
                   "contiguous uint8 tensor, got ", data.scalar_type());
  TORCH_CHECK_VALUE(data.numel() == nbytes, "groupquant: packed data of ", num(p.out_features), " rows of ",
                    num(p.num_blocks), " blocks of ", num(p.block_size), " ", num(p.code_bits), "-bit codes has ",
                    num(nbytes), " bytes, got ", num(data.numel()));
  TORCH_CHECK_TYPE(scale.scalar_type() == at::kByte && scale.is_contiguous(), "groupquant: packed scales must be "
                   "contiguous bytes (uint8), got ", scale.scalar_type());
  TORCH_CHECK_VALUE(scale.numel() == p.out_features * p.num_blocks, "groupquant: packed scales must hold ",
                    num(p.out_features * p.num_blocks), " bytes ([out_features, num_blocks]), got ", num(scale.numel()));
  TORCH_CHECK_TYPE(value_table.scalar_type() == at::kFloat && value_table.is_contiguous() &&
                   value_table.numel() == (int64_t(1) << p.code_bits), "groupquant: value_table must be ",
                   num(int64_t(1) << p.code_bits), " contiguous float32 values");
  TORCH_CHECK_TYPE(scale_table.scalar_type() == at::kFloat && scale_table.is_contiguous() && scale_table.numel() == 256,
                   "groupquant: scale_table must be 256 contiguous float32 values");
  const auto dev = data.device();
  TORCH_CHECK_VALUE(scale.device() == dev && value_table.device() == dev && scale_table.device() == dev,
                    "groupquant: packed data, scales and tables must be on one device");
  PackedGemmJob job{};
  job.p = p;
  job.data = data.data_ptr<uint8_t>();
  job.scale = scale.data_ptr<uint8_t>();
  job.value_table = value_table.data_ptr<float>();
  job.scale_table = scale_table.data_ptr<float>();
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK_TYPE(bias->scalar_type() == at::kFloat && bias->is_contiguous() && bias->numel() == p.out_features &&
                     bias->device() == dev, "groupquant: bias must be a contiguous float32 vector of ",
                     num(p.out_features), " values on the weight's device");
    job.bias = bias->data_ptr<float>();
  }
  return job;
}

at::Tensor padded_float_input(const at::Tensor& x, const PackedGemmParams& p) {
  const auto t = x.scalar_type();
  TORCH_CHECK_TYPE(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf, "groupquant: packed linear takes "
                   "float32, bfloat16 or float16 input, got ", t);
  TORCH_CHECK_VALUE(x.dim() == 2 && x.size(1) == p.in_features, "groupquant: packed linear input must be [rows, ",
                    num(p.in_features), "], got ", shape_text(x.sizes()));
  const int64_t kp = p.num_blocks * p.block_size;
  if (kp == p.in_features) return x.to(at::kFloat).contiguous();
  at::Tensor xp = at::zeros({x.size(0), kp}, x.options().dtype(at::kFloat));
  xp.narrow(1, 0, p.in_features).copy_(x);
  return xp;
}

at::Tensor packed_linear_impl(const at::Tensor& x, const at::Tensor& data, const at::Tensor& scale,
                              const at::Tensor& value_table, const at::Tensor& scale_table,
                              const c10::optional<at::Tensor>& bias, at::IntArrayRef params, PackedLinearRunner run) {
  const PackedGemmParams p = parse_packed_params(params);
  PackedGemmJob job = make_weight_job(p, data, scale, value_table, scale_table, bias);
  TORCH_CHECK_VALUE(x.device() == data.device(), "groupquant: packed linear input and weight must be on one device");
  const at::Tensor xf = padded_float_input(x, p);
  at::Tensor out = at::empty({x.size(0), p.out_features}, xf.options());
  job.x = xf.data_ptr<float>();
  job.out = out.data_ptr<float>();
  job.rows = x.size(0);
  job.x_bf16 = x.scalar_type() == at::kBFloat16;
  run(job, xf, out);
  return x.scalar_type() == at::kFloat ? out : out.to(x.scalar_type());
}

at::Tensor packed_decode_impl(const at::Tensor& data, const at::Tensor& scale, const at::Tensor& value_table,
                              const at::Tensor& scale_table, at::IntArrayRef params, PackedDecodeRunner run) {
  const PackedGemmParams p = parse_packed_params(params);
  PackedGemmJob job = make_weight_job(p, data, scale, value_table, scale_table, c10::nullopt);
  at::Tensor out = at::empty({p.out_features, p.num_blocks * p.block_size}, value_table.options());
  if (out.numel() > 0) run(job, out);
  return out.narrow(1, 0, p.in_features).contiguous();
}

namespace {

void run_linear_on_cpu(const PackedGemmJob& job, const at::Tensor& xf, const at::Tensor& out) {
  run_packed_linear_cpu(job, xf, out);
}

void run_decode_on_cpu(const PackedGemmJob& job, const at::Tensor& dst) {
  run_packed_decode_cpu(job, dst.data_ptr<float>());
}

at::Tensor packed_linear_cpu(const at::Tensor& x, const at::Tensor& data, const at::Tensor& scale,
                             const at::Tensor& value_table, const at::Tensor& scale_table,
                             const c10::optional<at::Tensor>& bias, at::IntArrayRef params) {
  return packed_linear_impl(x, data, scale, value_table, scale_table, bias, params, run_linear_on_cpu);
}

at::Tensor packed_decode_cpu(const at::Tensor& data, const at::Tensor& scale, const at::Tensor& value_table,
                             const at::Tensor& scale_table, at::IntArrayRef params) {
  return packed_decode_impl(data, scale, value_table, scale_table, params, run_decode_on_cpu);
}

constexpr CpuPath kPathsBestFirst[] = {CpuPath::kAvx512Bf16, CpuPath::kAvx512, CpuPath::kAvx2, CpuPath::kScalar};

std::string packed_cpu_paths() {
  std::string names;
  for (CpuPath p : kPathsBestFirst) {
    if (!cpu_path_available(p)) continue;
    if (!names.empty()) names += ",";
    names += cpu_path_name(p);
  }
  return names;
}

std::string packed_cpu_path() { return cpu_path_name(active_cpu_path()); }

std::string packed_set_cpu_path(const std::string& name) {
  for (CpuPath p : kPathsBestFirst) {
    if (name != cpu_path_name(p)) continue;
    TORCH_CHECK_VALUE(set_cpu_path(p), "groupquant: this CPU (or build) has no ", name, " path; it has ",
                      packed_cpu_paths());
    return name;
  }
  TORCH_CHECK_VALUE(false, "groupquant: CPU path must be one of avx512_bf16, avx512, avx2, scalar, got '", name, "'");
  return name;
}

std::string packed_cpu_last_kernel() { return last_cpu_kernel(); }

std::string packed_cpu_kernel_table() { return cpu_kernel_table_text(); }

// signals: multiply_adds, torch_threads, in_parallel_region, tasks, then rule 3's others_measured,
// gap, others, helpers, last_job, last_job_caller (ns), then rule 4's holding, wait_measured,
// window, waited, others (ns): threads_for_work, then worker_rule.
int64_t packed_worker_rule(at::IntArrayRef v) {
  TORCH_CHECK_VALUE(v.size() == 15, "groupquant: packed_worker_rule takes 15 signals, got ", num(v.size()));
  WorkerSignals s;
  s.requested = threads_for_work(v[0], static_cast<int>(v[1]), v[2] != 0);
  s.tasks = v[3];
  s.others_measured = v[4] != 0;
  s.others = OthersSample{v[5], v[6], v[7], v[8], v[9]};
  s.holding = v[10] != 0;
  s.wait_measured = v[11] != 0;
  s.wait = WaitSample{v[12], v[13], v[14]};
  return worker_rule(s);
}

std::string packed_gemm_param_fields() {
  std::string names(kPackedFieldNames);
  if (!names.empty() && names.back() == ',') names.pop_back();
  return names;
}

}  // namespace
}  // namespace packed
}  // namespace groupquant

TORCH_LIBRARY_FRAGMENT(groupquant, m) {
  m.def("packed_linear(Tensor x, Tensor data, Tensor scale, Tensor value_table, Tensor scale_table, Tensor? bias, "
        "int[] params) -> Tensor");
  m.def("packed_decode(Tensor data, Tensor scale, Tensor value_table, Tensor scale_table, int[] params) -> Tensor");
  m.def("packed_gemm_param_fields() -> str", &groupquant::packed::packed_gemm_param_fields);
  m.def("packed_cpu_paths() -> str", &groupquant::packed::packed_cpu_paths);
  m.def("packed_cpu_path() -> str", &groupquant::packed::packed_cpu_path);
  m.def("packed_set_cpu_path(str path) -> str", &groupquant::packed::packed_set_cpu_path);
  m.def("packed_cpu_last_kernel() -> str", &groupquant::packed::packed_cpu_last_kernel);
  m.def("packed_cpu_kernel_table() -> str", &groupquant::packed::packed_cpu_kernel_table);
  m.def("packed_worker_rule(int[] signals) -> int", &groupquant::packed::packed_worker_rule);
}

TORCH_LIBRARY_IMPL(groupquant, CPU, m) {
  m.impl("packed_linear", &groupquant::packed::packed_linear_cpu);
  m.impl("packed_decode", &groupquant::packed::packed_decode_cpu);
}
