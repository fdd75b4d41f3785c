// CUDA registration of the packed-GEMM ops (compiled only in a CUDA build of the extension).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "packed_gemm.h"
#include "packed_gemm_ops.h"

namespace groupquant {
namespace packed {

int run_packed_linear_cuda(const PackedGemmJob& job, cudaStream_t stream);
int run_packed_decode_cuda(const PackedGemmJob& job, float* dst, cudaStream_t stream);

namespace {

void check(int err) {
  TORCH_CHECK(err == 0, "groupquant: packed CUDA kernel failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
}

at::Tensor packed_linear_cuda(const at::Tensor& x, const at::Tensor& data, const at::Tensor& scale,
                              const at::Tensor& value_table, const at::Tensor& scale_table,
                              const c10::optional<at::Tensor>& bias, at::IntArrayRef params) {
  const c10::cuda::CUDAGuard guard(data.device());
  const PackedGemmParams p = parse_packed_params(params);
  PackedGemmJob job = make_weight_job(p, data, scale, value_table, scale_table, bias);
  TORCH_CHECK_VALUE(x.device() == data.device(), "groupquant: packed linear input and weight must be on one device");
  const at::Tensor xf = padded_float_input(x, p);
  at::Tensor out = at::empty({x.size(0), p.out_features}, xf.options());
  job.x = xf.data_ptr<float>();
  job.out = out.data_ptr<float>();
  job.rows = x.size(0);
  check(run_packed_linear_cuda(job, c10::cuda::getCurrentCUDAStream(data.device().index()).stream()));
  return x.scalar_type() == at::kFloat ? out : out.to(x.scalar_type());
}

at::Tensor packed_decode_cuda(const at::Tensor& data, const at::Tensor& scale, const at::Tensor& value_table,
                              const at::Tensor& scale_table, at::IntArrayRef params) {
  const c10::cuda::CUDAGuard guard(data.device());
  const PackedGemmParams p = parse_packed_params(params);
  PackedGemmJob job = make_weight_job(p, data, scale, value_table, scale_table, c10::nullopt);
  at::Tensor out = at::empty({p.out_features, p.num_blocks * p.block_size}, value_table.options());
  check(run_packed_decode_cuda(job, out.data_ptr<float>(),
                               c10::cuda::getCurrentCUDAStream(data.device().index()).stream()));
  return out.narrow(1, 0, p.in_features).contiguous();
}

}  // namespace
}  // namespace packed
}  // namespace groupquant

TORCH_LIBRARY_IMPL(groupquant, CUDA, m) {
  m.impl("packed_linear", &groupquant::packed::packed_linear_cuda);
  m.impl("packed_decode", &groupquant::packed::packed_decode_cuda);
}
