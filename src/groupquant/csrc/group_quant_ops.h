// torch glue shared by the CPU and CUDA registrations: argument checks, the [outer, dim, inner]
// view, output allocation. The schema (see ops.cpp) passes the element format as plain named
// ints/floats, derived in Python from groupquant.formats (ops/kernel_format.py).
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "group_quant_job.h"

namespace groupquant {

// The op arguments after the input tensor, in schema order.
#define GQ_OP_PARAMS                                                                              \
  const at::Tensor &x, int64_t dim, int64_t block_size, bool is_float, bool is_signed,           \
      int64_t exponent_bits, int64_t mantissa_bits, int64_t bias, int64_t emin, int64_t emax,     \
      double max_normal, int64_t qmin, int64_t qmax, int64_t frac_bits, int64_t special,          \
      int64_t nan_code, int64_t even_bits, bool negative_zero, int64_t exp_max,                    \
      c10::string_view scale_mode, c10::string_view rounding, int64_t seed
#define GQ_OP_ARGS                                                                              \
  x, dim, block_size, is_float, is_signed, exponent_bits, mantissa_bits, bias, emin, emax,      \
      max_normal, qmin, qmax, frac_bits, special, nan_code, even_bits, negative_zero, exp_max,     \
      scale_mode, rounding, seed

// Runs a filled job on x's device.
using Runner = void (*)(const Job& job, const at::Tensor& x);

// Fake-quant: dequantized values (x's shape and dtype, contiguous) and, if want_mask, a bool mask
// (|x / scale| <= max_normal); the mask is an empty tensor otherwise.
std::tuple<at::Tensor, at::Tensor> fake_quant_impl(GQ_OP_PARAMS, bool want_mask, Runner runner);

// Quantize: codes (contracted layout, code_dtype), float32 scales and uint8 E8M0 codes (scale shape).
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_impl(GQ_OP_PARAMS, at::ScalarType code_dtype,
                                                             Runner runner);

}  // namespace groupquant
