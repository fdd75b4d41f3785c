// C entry points into the extension's CUDA kernels built for the CPU (cuda_runtime.h, beside this
// file), called from Python through ctypes by tests/csrc/test_cuda_kernels_emulated.py.
//
// Each call takes one record (mirrored field for field by the ctypes structures in the test's
// build module, cuda_emulation/build.py) and fills the job the way the op glue does
// (csrc/ops.cpp make_job, csrc/packed_gemm_ops.cpp), then runs the CUDA source's entry point.
// Python computes the layout (outer, dim_size, inner, block size, blocks) and allocates every
// output, so the test checks the kernel, not this glue.
#include <cuda_runtime.h>  // the stand-in beside this file

#include <cstdint>

#include "group_quant_job.h"
#include "packed_gemm.h"

namespace groupquant {
namespace packed {
int run_packed_linear_cuda(const PackedGemmJob& job, cudaStream_t stream);
int run_packed_decode_cuda(const PackedGemmJob& job, float* dst, cudaStream_t stream);
}  // namespace packed
}  // namespace groupquant

using groupquant::Job;
using groupquant::packed::PackedGemmJob;

extern "C" {

// One group_fake_quant / group_quantize call: the packed record (kNumParams values, the op's
// `params`), the input viewed as [outer, dim_size, inner], and the outputs (null: not asked for).
struct EmulatedGroupCall {
  const int64_t* params;
  const void* x;
  int32_t dtype;
  int64_t outer, dim_size, inner, block_size, num_blocks;
  void* out;
  uint8_t* mask;
  void* codes;
  int32_t code_type;
  float* scale;
  uint8_t* scale_codes;
  const float* tensor_scale;
};

// One packed_linear (dst null) or packed_decode (dst: [N, num_blocks * block_size] float32) call.
struct EmulatedPackedCall {
  const int64_t* params;
  const uint8_t* data;
  const uint8_t* scale;
  const float* value_table;
  const float* scale_table;
  const float* x;
  const float* bias;
  float* out;
  int64_t rows;
  float* dst;
};

int gq_emulated_num_params() { return groupquant::kNumParams; }

int gq_emulated_num_packed_params() { return groupquant::packed::kNumPackedParams; }

// 0: ran; 1: a params field out of its type's range.
int gq_emulated_group_quant(const EmulatedGroupCall* c) {
  groupquant::CallParams call{};
  Job job;
  if (groupquant::unpack_params(c->params, &call, &job.fmt) != nullptr) return 1;
  groupquant::derive_format_constants(job.fmt);
  job.x = c->x;
  job.dtype = c->dtype;
  job.outer = c->outer;
  job.dim_size = c->dim_size;
  job.inner = c->inner;
  job.block_size = c->block_size;
  job.num_blocks = c->num_blocks;
  job.scale_mode = call.scale_mode;
  job.rounding = call.rounding;
  job.seed = call.seed;
  job.out = c->out;
  job.mask = c->mask;
  job.codes = c->codes;
  job.code_type = c->code_type;
  job.scale = c->scale;
  job.scale_codes = c->scale_codes;
  job.tensor_scale = c->tensor_scale;
  return groupquant::run_cuda(job, nullptr);
}

// One tensor_scale call after its reduction: the job itself (plain pointers and values; the
// ctypes structure mirrors TensorScaleJob, csrc/group_quant_job.h), with the divisor the op glue
// derives from the record (csrc/ops.cpp tensor_scale_impl).
int gq_emulated_tensor_scale(const groupquant::TensorScaleJob* job) {
  return groupquant::run_tensor_scale_cuda(*job, nullptr);
}

// 0: ran; 1: a params field out of its type's range.
int gq_emulated_packed(const EmulatedPackedCall* c) {
  PackedGemmJob job{};
  if (groupquant::packed::unpack_packed_params(c->params, &job.p) != nullptr) return 1;
  job.data = c->data;
  job.scale = c->scale;
  job.value_table = c->value_table;
  job.scale_table = c->scale_table;
  job.x = c->x;
  job.bias = c->bias;
  job.out = c->out;
  job.rows = c->rows;
  if (c->dst != nullptr) return groupquant::packed::run_packed_decode_cuda(job, c->dst, nullptr);
  return groupquant::packed::run_packed_linear_cuda(job, nullptr);
}

}  // extern "C"
