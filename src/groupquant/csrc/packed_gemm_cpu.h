// CPU entry points of the packed-weight GEMM (packed_gemm_cpu.cpp).
#pragma once

#include <ATen/ATen.h>

#include "packed_gemm.h"

namespace groupquant {
namespace packed {

// out[M, N] = x @ W^T (+ bias), float32; x, out: the job's float32 tensors (x zero-padded to
// num_blocks * block_size columns).
void run_packed_linear_cpu(const PackedGemmJob& job, const at::Tensor& x, const at::Tensor& out);

// dst[N, num_blocks * block_size] = the decoded weight (padding columns included), float32.
void run_packed_decode_cpu(const PackedGemmJob& job, float* dst);

}  // namespace packed
}  // namespace groupquant
