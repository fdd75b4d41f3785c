// CUDA kernels of group-wise fake-quant / quantize (same math as the CPU kernel: group_quant.h).
//
// Last-dim grouping (inner == 1): a group of G lanes (G = 32, or the next power of two >= the
// block size when it is smaller) owns one block; lanes read consecutive elements (coalesced), the
// block's amax is reduced with warp shuffles (no shared memory, so no bank conflicts), then each
// lane quantizes its elements. inner > 1: one thread per (block, column); neighbouring threads read
// neighbouring columns (coalesced) and walk the block's rows.
// Build with --fmad=false: a fused multiply-add would change results.
// This file includes no torch header, so it compiles alone with `nvcc -c`.
#include <cuda_runtime.h>

#include <cstdint>

#include "group_quant.h"
#include "group_quant_job.h"

namespace groupquant {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;

struct F32 {
  using T = float;
  static __device__ __forceinline__ float load(T v) { return v; }
  static __device__ __forceinline__ T store(float v) { return v; }
  static __device__ __forceinline__ uint32_t abs_bits(T v) { return f2u(v) & 0x7FFFFFFFu; }
  static __device__ __forceinline__ uint32_t widen_abs(uint32_t a) { return a; }
};

struct BF16 {
  using T = uint16_t;
  static __device__ __forceinline__ float load(T v) { return bf16_bits_to_float(v); }
  static __device__ __forceinline__ T store(float v) { return float_to_bf16_bits(v); }
  static __device__ __forceinline__ uint32_t abs_bits(T v) { return v & 0x7FFFu; }
  static __device__ __forceinline__ uint32_t widen_abs(uint32_t a) { return a << 16; }
};

struct F16 {
  using T = uint16_t;
  static __device__ __forceinline__ float load(T v) { return fp16_bits_to_float(v); }
  static __device__ __forceinline__ T store(float v) { return float_to_fp16_bits(v); }
  static __device__ __forceinline__ uint32_t abs_bits(T v) { return v & 0x7FFFu; }
  static __device__ __forceinline__ uint32_t widen_abs(uint32_t a) {
    return f2u(fp16_bits_to_float(static_cast<uint16_t>(a)));
  }
};

__device__ __forceinline__ void store_code(const Job& job, int64_t at, int32_t code) {
  switch (job.code_type) {
    case kCodeInt8: static_cast<int8_t*>(job.codes)[at] = static_cast<int8_t>(code); break;
    case kCodeInt16: static_cast<int16_t*>(job.codes)[at] = static_cast<int16_t>(code); break;
    case kCodeInt32: static_cast<int32_t*>(job.codes)[at] = code; break;
    default: static_cast<uint8_t*>(job.codes)[at] = static_cast<uint8_t>(code); break;
  }
}

// The per-tensor second scale g (read on the device), 1 without one.
__device__ __forceinline__ float tensor_scale_of(const Job& job) {
  return job.tensor_scale != nullptr ? *job.tensor_scale : 1.0f;
}

// Quantize one element (input index i, code index code_at) of a block with scale sc (g: tensor scale).
template <class S, bool Stochastic, int Apply>
__device__ __forceinline__ void quantize_one(const Job& job, const FormatParams& f, const RoundRule& rule,
                                             const BlockScale& sc, float g, int64_t i, int64_t code_at) {
  const float xv = S::load(static_cast<const typename S::T*>(job.x)[i]);
  const float s = scale_input<Apply>(xv, sc);
  const float threshold = Stochastic ? uniform_from_hash(static_cast<uint64_t>(i), job.seed) : rule.threshold;
  const float v = job.rounding == kRoundEven ? quantize_element<true>(s, f, rule, threshold)
                                              : quantize_element<false>(s, f, rule, threshold);
  if (job.out != nullptr) {
    static_cast<typename S::T*>(job.out)[i] = S::store(unscale_element<Apply>(v, sc.scale, g));
    if (job.mask != nullptr) job.mask[i] = fabsf(s) <= f.max_normal ? 1 : 0;
  }
  if (job.codes != nullptr) store_code(job, code_at, encode_element(v, f));
}

// The code of a padding position (input 0) in a block with scale sc.
template <int Apply>
__device__ __forceinline__ int32_t padding_code(const FormatParams& f, const RoundRule& rule, const BlockScale& sc) {
  const float s = scale_input<Apply>(0.0f, sc);
  return encode_element(quantize_element(s, f, rule, rule.threshold), f);
}

template <class S, bool Stochastic, int Apply>
__global__ void rows_kernel(const Job job, int group) {
  const FormatParams f = job.fmt;
  const RoundRule rule = round_rule(job.rounding);
  const float g = tensor_scale_of(job);
  const typename S::T* x = static_cast<const typename S::T*>(job.x);
  const int lane = threadIdx.x & 31;
  const int sub = lane & (group - 1);
  const int per_warp = 32 / group;
  const int64_t k = job.num_blocks, bs = job.block_size, dim = job.dim_size;
  const int64_t total = job.outer * k;
  const int64_t warp_tiles = (total + per_warp - 1) / per_warp;
  const int64_t warp0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t wt = warp0; wt < warp_tiles; wt += warps) {  // uniform across the warp
    const int64_t b = wt * per_warp + lane / group;
    const bool valid = b < total;
    const int64_t o = valid ? b / k : 0, kb = valid ? b % k : 0;
    const int64_t start = o * dim + kb * bs;
    const int64_t len = valid ? min(bs, dim - kb * bs) : 0;
    uint32_t m = 0;
    for (int64_t t = sub; t < len; t += group) m = max(m, S::abs_bits(x[start + t]));
    for (int off = group >> 1; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off, group));
    if (!valid) continue;
    const BlockScale sc = block_scale(S::widen_abs(m), f, job.scale_mode, g);
    if (sub == 0 && job.scale != nullptr) job.scale[b] = sc.scale;
    if (sub == 0 && job.scale_codes != nullptr) job.scale_codes[b] = sc.code;
    for (int64_t t = sub; t < len; t += group) quantize_one<S, Stochastic, Apply>(job, f, rule, sc, g, start + t, b * bs + t);
    if (job.codes != nullptr && len < bs) {
      const int32_t code = padding_code<Apply>(f, rule, sc);
      for (int64_t t = len + sub; t < bs; t += group) store_code(job, b * bs + t, code);
    }
  }
}

template <class S, bool Stochastic, int Apply>
__global__ void columns_kernel(const Job job) {
  const FormatParams f = job.fmt;
  const RoundRule rule = round_rule(job.rounding);
  const float g = tensor_scale_of(job);
  const typename S::T* x = static_cast<const typename S::T*>(job.x);
  const int64_t k = job.num_blocks, bs = job.block_size, dim = job.dim_size, inner = job.inner;
  const int64_t total = job.outer * k * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t c = idx % inner, ob = idx / inner;
    const int64_t o = ob / k, kb = ob % k;
    const int64_t j0 = kb * bs, len = min(bs, dim - j0);
    const int64_t base = (o * dim + j0) * inner + c;
    uint32_t m = 0;
    for (int64_t j = 0; j < len; ++j) m = max(m, S::abs_bits(x[base + j * inner]));
    const BlockScale sc = block_scale(S::widen_abs(m), f, job.scale_mode, g);
    if (job.scale != nullptr) job.scale[ob * inner + c] = sc.scale;
    if (job.scale_codes != nullptr) job.scale_codes[ob * inner + c] = sc.code;
    const int64_t code_base = ob * bs * inner + c;
    for (int64_t j = 0; j < len; ++j) {
      quantize_one<S, Stochastic, Apply>(job, f, rule, sc, g, base + j * inner, code_base + j * inner);
    }
    if (job.codes != nullptr && len < bs) {
      const int32_t code = padding_code<Apply>(f, rule, sc);
      for (int64_t j = len; j < bs; ++j) store_code(job, code_base + j * inner, code);
    }
  }
}

int64_t grid_for(int64_t threads) {
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  return blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

template <class S, bool Stochastic, int Apply>
void launch(const Job& job, cudaStream_t stream) {
  if (job.inner == 1) {
    int group = 32;
    while (group > 1 && group / 2 >= job.block_size) group /= 2;
    const int64_t per_warp = 32 / group;
    const int64_t warps = (job.outer * job.num_blocks + per_warp - 1) / per_warp;
    rows_kernel<S, Stochastic, Apply><<<static_cast<unsigned>(grid_for(warps * 32)), kThreads, 0, stream>>>(job, group);
  } else {
    const int64_t threads = job.outer * job.num_blocks * job.inner;
    columns_kernel<S, Stochastic, Apply><<<static_cast<unsigned>(grid_for(threads)), kThreads, 0, stream>>>(job);
  }
}

template <class S, bool Stochastic>
void dispatch_apply(const Job& job, cudaStream_t stream) {
  switch (job.scale_apply()) {
    case kApplyInv: launch<S, Stochastic, kApplyInv>(job, stream); break;
    case kApplyTwoLevel: launch<S, Stochastic, kApplyTwoLevel>(job, stream); break;
    default: launch<S, Stochastic, kApplyDiv>(job, stream); break;
  }
}

template <class S>
void dispatch(const Job& job, cudaStream_t stream) {
  if (job.rounding == kRoundStochastic) dispatch_apply<S, true>(job, stream);
  else dispatch_apply<S, false>(job, stream);
}

}  // namespace

int run_cuda(const Job& job, void* stream) {
  if (job.numel() == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (job.dtype) {
    case kBFloat16: dispatch<BF16>(job, s); break;
    case kFloat16: dispatch<F16>(job, s); break;
    default: dispatch<F32>(job, s); break;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace groupquant
