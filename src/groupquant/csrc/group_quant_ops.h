// torch glue shared by the CPU and CUDA registrations: argument checks, the [outer, dim, inner]
// view, output allocation. Every op takes the input tensor and `int[] params`: the packed
// parameter record (group_quant_params.h; built in Python by ops/kernel_params.py).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "group_quant_job.h"

namespace groupquant {

// Runs a filled job on x's device.
using Runner = void (*)(const Job& job, const at::Tensor& x);

// Fake-quant: (out, mask, scale): dequantized values (x's shape and dtype, contiguous); if
// want_mask a bool mask (|x / scale| <= max_normal), if want_scale the float32 scale of every
// block in the contracted scale shape sizes[:d] + (k, 1) + sizes[d+1:]; each an empty tensor otherwise.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fake_quant_impl(const at::Tensor& x, at::IntArrayRef params,
                                                               bool want_mask, bool want_scale,
                                                               const std::optional<at::Tensor>& tensor_scale,
                                                               Runner runner);

// Quantize: codes (contracted layout, code_dtype), float32 scales and uint8 scale codes (scale shape).
// tensor_scale: the per-tensor second scale (a float32 one-element tensor on x's device) or none.
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_impl(const at::Tensor& x, at::IntArrayRef params,
                                                             at::ScalarType code_dtype,
                                                             const std::optional<at::Tensor>& tensor_scale,
                                                             Runner runner);

// Runs a filled tensor-scale job on x's device.
using TensorScaleRunner = void (*)(const TensorScaleJob& job, const at::Tensor& x);

// The per-tensor scale g of two-level scaling of x (params must ask for one): float32, 0-d, on x's
// device; 1 for an empty x. One reduction (at::aminmax) and one computation from its two values.
at::Tensor tensor_scale_impl(const at::Tensor& x, at::IntArrayRef params, TensorScaleRunner runner);

}  // namespace groupquant
