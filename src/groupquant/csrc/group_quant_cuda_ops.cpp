// CUDA registration of the groupquant ops (compiled only in a CUDA build of the extension).
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include "group_quant_ops.h"

namespace groupquant {
namespace {

void run_on_cuda(const Job& job, const at::Tensor& x) {
  const int err = run_cuda(job, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(err == 0, "groupquant: CUDA kernel failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fake_quant_cuda(const at::Tensor& x, at::IntArrayRef params,
                                                               bool want_mask, bool want_scale,
                                                               const std::optional<at::Tensor>& ts) {
  const c10::cuda::CUDAGuard guard(x.device());
  return fake_quant_impl(x, params, want_mask, want_scale, ts, run_on_cuda);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_cuda(const at::Tensor& x, at::IntArrayRef params,
                                                             at::ScalarType code_dtype,
                                                             const std::optional<at::Tensor>& ts) {
  const c10::cuda::CUDAGuard guard(x.device());
  return quantize_impl(x, params, code_dtype, ts, run_on_cuda);
}

void tensor_scale_on_cuda(const TensorScaleJob& job, const at::Tensor& x) {
  const int err = run_tensor_scale_cuda(job, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(err == 0, "groupquant: CUDA kernel failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
}

at::Tensor tensor_scale_cuda(const at::Tensor& x, at::IntArrayRef params) {
  const c10::cuda::CUDAGuard guard(x.device());
  return tensor_scale_impl(x, params, tensor_scale_on_cuda);
}

}  // namespace
}  // namespace groupquant

TORCH_LIBRARY_IMPL(groupquant, CUDA, m) {
  m.impl("group_fake_quant", &groupquant::fake_quant_cuda);
  m.impl("group_quantize", &groupquant::quantize_cuda);
  m.impl("tensor_scale", &groupquant::tensor_scale_cuda);
}
