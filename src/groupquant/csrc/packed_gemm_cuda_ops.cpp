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

cudaStream_t stream_of(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void run_linear_on_cuda(const PackedGemmJob& job, const at::Tensor& xf, const at::Tensor&) {
  check(run_packed_linear_cuda(job, stream_of(xf)));
}

void run_decode_on_cuda(const PackedGemmJob& job, const at::Tensor& dst) {
  check(run_packed_decode_cuda(job, dst.data_ptr<float>(), stream_of(dst)));
}

at::Tensor packed_linear_cuda(const at::Tensor& x, const at::Tensor& data, const at::Tensor& scale,
                              const at::Tensor& value_table, const at::Tensor& scale_table,
                              const c10::optional<at::Tensor>& bias, at::IntArrayRef params) {
  const c10::cuda::CUDAGuard guard(data.device());
  return packed_linear_impl(x, data, scale, value_table, scale_table, bias, params, run_linear_on_cuda);
}

at::Tensor packed_decode_cuda(const at::Tensor& data, const at::Tensor& scale, const at::Tensor& value_table,
                              const at::Tensor& scale_table, at::IntArrayRef params) {
  const c10::cuda::CUDAGuard guard(data.device());
  return packed_decode_impl(data, scale, value_table, scale_table, params, run_decode_on_cuda);
}

}  // namespace
}  // namespace packed
}  // namespace groupquant

TORCH_LIBRARY_IMPL(groupquant, CUDA, m) {
  m.impl("packed_linear", &groupquant::packed::packed_linear_cuda);
  m.impl("packed_decode", &groupquant::packed::packed_decode_cuda);
}
