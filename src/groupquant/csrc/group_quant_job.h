// One group-wise quantization call, described with plain pointers and sizes (no torch types), so
// the CPU source, the CUDA source and the torch op glue (ops.cpp) share it.
//
// Layout: the input is viewed as [outer, dim_size, inner] (row-major, contiguous); groups run along
// the middle dim in num_blocks blocks of block_size elements, the last one short when dim_size is
// not a multiple (padding is handled inside the kernels; the tensor is never padded).
#pragma once

#include <cstdint>

#include "group_quant.h"

namespace groupquant {

enum DType : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };
enum CodeType : int32_t { kCodeUInt8 = 0, kCodeInt8 = 1, kCodeInt16 = 2, kCodeInt32 = 3 };

struct Job {
  // input, [outer, dim_size, inner]
  const void* x = nullptr;
  int32_t dtype = kFloat32;
  int64_t outer = 0, dim_size = 0, inner = 0;
  int64_t block_size = 0, num_blocks = 0;  // block_size <= max(dim_size, 1)
  int64_t dim = 0;                          // the grouped dim of the original tensor (op glue only)
  // fake-quant outputs (x's shape): dequantized values in x's dtype, optional bool mask
  // (|x / scale| <= max_normal, the clipped straight-through gradient).
  void* out = nullptr;
  uint8_t* mask = nullptr;
  // quantize outputs: codes [outer, num_blocks, block_size, inner] (padding included),
  // scale / scale_codes [outer, num_blocks, inner] (scale_codes: the scale format's codes).
  void* codes = nullptr;
  int32_t code_type = kCodeUInt8;
  float* scale = nullptr;
  uint8_t* scale_codes = nullptr;
  // numerics
  FormatParams fmt{};
  int32_t scale_mode = kScaleFloor;
  int32_t rounding = kRoundEven;
  uint32_t seed = 0;
  // the per-tensor second scale g (fmt.tensor_scale): a host float (CPU) and a pointer to it on
  // the input's device (CUDA kernels read it there); 1 / null without one
  float tensor_scale_host = 1.0f;
  const float* tensor_scale = nullptr;

  int64_t numel() const { return outer * dim_size * inner; }
  bool pow2_scale() const { return scale_mode != kScaleFloat; }
  // how block scales apply to elements (ScaleApply)
  int32_t scale_apply() const { return pow2_scale() ? kApplyInv : (fmt.tensor_scale ? kApplyTwoLevel : kApplyDiv); }
  // g on the host (CPU kernels)
  float g() const { return tensor_scale_host; }
};

// One tensor-scale call (op groupquant::tensor_scale): the per-tensor scale g of two-level scaling
// from a tensor's least and greatest values (one element each, in the tensor's dtype, on its
// device), written to *g (float32, the same device).
struct TensorScaleJob {
  const void* lo = nullptr;
  const void* hi = nullptr;
  int32_t dtype = kFloat32;
  float divisor = 1.0f;  // scale_max * max_normal of the record (exact in float32)
  float* g = nullptr;
};

// The element at p of a tensor of `dtype`, as float32 (exact).
GQ_HD float load_element(const void* p, int32_t dtype) {
  if (dtype == kBFloat16) return bf16_bits_to_float(*static_cast<const uint16_t*>(p));
  if (dtype == kFloat16) return fp16_bits_to_float(*static_cast<const uint16_t*>(p));
  return *static_cast<const float*>(p);
}

// The tensor-scale call's one computation, on whichever device runs it (the CPU op directly, the
// CUDA op in one thread).
GQ_HD void run_tensor_scale(const TensorScaleJob& job) {
  *job.g = tensor_scale_value(load_element(job.lo, job.dtype), load_element(job.hi, job.dtype), job.divisor);
}

// Kernels, one per device. Each fills the non-null outputs of the job.
void run_cpu(const Job& job);
int run_cuda(const Job& job, void* stream);  // stream: a cudaStream_t; returns a cudaError_t (0: ok)
int run_tensor_scale_cuda(const TensorScaleJob& job, void* stream);  // as run_cuda

}  // namespace groupquant
