// Argument checks and job set-up shared by the CPU and CUDA registrations of the packed-GEMM ops.
#pragma once

#include <ATen/ATen.h>

#include "packed_gemm.h"

namespace groupquant {
namespace packed {

// The record of `params`, checked (sizes, widths, decode path); TORCH_CHECK errors name the field.
PackedGemmParams parse_packed_params(at::IntArrayRef params);

// Checks data / scale / tables / bias against p (dtypes, shapes, one device) and fills the job's
// weight pointers; rows, x and out are left for the caller.
PackedGemmJob make_weight_job(const PackedGemmParams& p, const at::Tensor& data, const at::Tensor& scale,
                              const at::Tensor& value_table, const at::Tensor& scale_table,
                              const c10::optional<at::Tensor>& bias);

// x ([M, in_features], float32 / bfloat16 / float16) as contiguous float32 [M, num_blocks * block_size],
// zero-padded; a TypeError names the dtype otherwise.
at::Tensor padded_float_input(const at::Tensor& x, const PackedGemmParams& p);

// Runs a filled linear job on its device: xf the padded float32 input, out the float32 output.
using PackedLinearRunner = void (*)(const PackedGemmJob& job, const at::Tensor& xf, const at::Tensor& out);
// Runs a decode job on its device into dst ([out_features, num_blocks * block_size] float32).
using PackedDecodeRunner = void (*)(const PackedGemmJob& job, const at::Tensor& dst);

// The ops packed_linear / packed_decode for any device: checks, job, outputs; `run` does the work.
at::Tensor packed_linear_impl(const at::Tensor& x, const at::Tensor& data, const at::Tensor& scale,
                              const at::Tensor& value_table, const at::Tensor& scale_table,
                              const c10::optional<at::Tensor>& bias, at::IntArrayRef params, PackedLinearRunner run);
at::Tensor packed_decode_impl(const at::Tensor& data, const at::Tensor& scale, const at::Tensor& value_table,
                              const at::Tensor& scale_table, at::IntArrayRef params, PackedDecodeRunner run);

}  // namespace packed
}  // namespace groupquant
