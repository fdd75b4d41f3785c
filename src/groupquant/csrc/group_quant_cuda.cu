// CUDA kernels of group-wise fake-quant / quantize (same math as the CPU kernel: group_quant.h).
//
// Memory traffic is the cost (the math per element is a few dozen integer and float operations),
// so every thread moves a run of V elements at a time where the shape allows, loaded and stored as
// one vector (kRowsV: 16 bytes along the last dim; kColumnsV: 4 elements along another), with
// uint8 codes and the mask stored V bytes at once. Where a row or block does not start on a
// multiple of V, or a pointer is not aligned to a run, the same kernels run with V = 1.
//
// Last-dim grouping (inner == 1): a group of G lanes (the next power of two >= block_size /
// (V * kHeldRuns), at most 32) owns one block; lanes read consecutive runs (coalesced), the block's
// amax is reduced with warp shuffles (no shared memory), then each lane quantizes its runs: held in
// registers where a block is at most kHeldRuns runs a lane (MX and NVFP4 blocks in every dtype: an
// MX block of bfloat16 is one lane's), else read again (from L1).
// Other grouping dims (inner > 1): G lanes (the next power of two >= block_size / kHeldRows) own
// one (block, run of V neighbouring columns); lanes of neighbouring runs read neighbouring runs of a
// row (coalesced), a lane holds its rows of the block in registers, and each column's amax is
// reduced over the G lanes with shuffles: the block is read once.
// The rounding kind (RoundKind) is a template parameter, so the element loop has no branch.
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

// Storage types: load / store one element (store: the header's conversion, NaN code included),
// pack2: two elements' bits as one word, the first in the low half, by the card's paired conversion
// (elsewhere the header's, with the card's NaN code 0x7FFF, so that the CUDA emulation shows a NaN
// the caller fails to replace), kNaN2: two NaN codes of the header's conversion.
#if !GQ_DEVICE_CONVERSIONS
// Off the card: two 16-bit elements' bits (lo_bits first, in the low half) with the card's NaN
// code 0x7FFF where an element is NaN, as its paired conversions give.
__device__ __forceinline__ uint32_t card_like_pair(uint16_t lo_bits, uint16_t hi_bits, bool lo_nan, bool hi_nan) {
  return (lo_nan ? 0x7FFFu : lo_bits) | ((hi_nan ? 0x7FFFu : hi_bits) << 16);
}
#endif

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
  static constexpr uint32_t kNaN2 = 0x7FC07FC0u;
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
#if GQ_DEVICE_CONVERSIONS
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
#else
    return card_like_pair(store(lo), store(hi), lo != lo, hi != hi);
#endif
  }
};

struct F16 {
  using T = uint16_t;
  static __device__ __forceinline__ float load(T v) { return fp16_bits_to_float(v); }
  static __device__ __forceinline__ T store(float v) { return float_to_fp16_bits(v); }
  static __device__ __forceinline__ uint32_t abs_bits(T v) { return v & 0x7FFFu; }
  static __device__ __forceinline__ uint32_t widen_abs(uint32_t a) {
    return f2u(fp16_bits_to_float(static_cast<uint16_t>(a)));
  }
  static constexpr uint32_t kNaN2 = 0x7E007E00u;  // a NaN product on the card is positive
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
#if GQ_DEVICE_CONVERSIONS
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
#else
    return card_like_pair(store(lo), store(hi), lo != lo, hi != hi);
#endif
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

// V elements of storage type T moved as one aligned load or store (of 16, 8 or 4 bytes).
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Store v at p (aligned for Vec<T, V>) as one vector store: 16 or 8 bytes as one st.global.v4 / v2
// (nvcc split the plain assignment of a lane's later runs into 4-byte stores); elsewhere (the CUDA
// emulation) the assignment.
template <class T, int V>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, V>& v) {
#if defined(__CUDA_ARCH__)
  const uint32_t* w = reinterpret_cast<const uint32_t*>(v.v);
  if constexpr (sizeof(Vec<T, V>) == 16) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
    return;
  } else if constexpr (sizeof(Vec<T, V>) == 8) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
    return;
  }
#endif
  *reinterpret_cast<Vec<T, V>*>(p) = v;
}

// The run of V elements of storage type T at input index i (one vector load).
template <class T, int V>
__device__ __forceinline__ Vec<T, V> load_run(const Job& job, int64_t i) {
  return *reinterpret_cast<const Vec<T, V>*>(static_cast<const T*>(job.x) + i);
}

// Where a run's elements lie in NaN blocks, for the saturating kernels (Clamp), whose values are
// NaN exactly there and whose conversions and encoders take finite values: all-ones halves of the
// words of two 16-bit values, all-ones bytes of the words of four codes. Worked out once a block
// (run_nan_of), not once a run.
template <int V>
struct RunNaN {
  uint32_t halves[V / 2 > 0 ? V / 2 : 1];
  uint32_t bytes[(V + 3) / 4];
};

// The RunNaN of a run whose element j has scale sc[PerElementScale ? j : 0].
template <int V, bool PerElementScale>
__device__ __forceinline__ RunNaN<V> run_nan_of(const BlockScale* sc) {
  RunNaN<V> n;
#pragma unroll
  for (int w = 0; w < V / 2; ++w) {
    const float lo = sc[PerElementScale ? 2 * w : 0].scale, hi = sc[PerElementScale ? 2 * w + 1 : 0].scale;
    n.halves[w] = (lo != lo ? 0x0000FFFFu : 0u) | (hi != hi ? 0xFFFF0000u : 0u);
  }
#pragma unroll
  for (int w = 0; w < (V + 3) / 4; ++w) {
    n.bytes[w] = 0;
#pragma unroll
    for (int b = 0; b < 4 && 4 * w + b < V; ++b) {
      const float e = sc[PerElementScale ? 4 * w + b : 0].scale;
      n.bytes[w] |= e != e ? 0xFFu << (8 * b) : 0u;
    }
  }
  return n;
}

// Quantize the run `in` of V consecutive elements (input index i, code index code_at) with block
// scale sc[0], or element j with sc[j] (PerElementScale: V neighbouring columns, each its own
// block); nan: run_nan_of(sc) (read by the Clamp kernels); g: the tensor scale. One vector store
// each of the values, the mask and uint8 codes.
// Clamp (f.clamps: a saturating format): saturation is the clamp, and a value is NaN exactly where
// its block's scale is (an element is finite in a finite block, whose finite scale keeps it so:
// exp_max caps the scale, the float rule's scale times g is at most amax over max_normal), so
// 16-bit values are converted two at a time and byte codes encoded as finite values, and a NaN
// block's set to the NaN codes after.
template <class S, int V, int Round, int Apply, bool PerElementScale, bool Clamp>
__device__ __forceinline__ void quantize_run(const Job& job, const FormatParams& f, const RoundRule& rule,
                                             const BlockScale* sc, const RunNaN<V>& nan, float g,
                                             const Vec<typename S::T, V>& in, int64_t i, int64_t code_at) {
  using T = typename S::T;
  constexpr bool kPairs = Clamp && sizeof(T) == 2 && V % 2 == 0;
  float vals[V], outs[V];
  Vec<T, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const BlockScale& scj = sc[PerElementScale ? j : 0];
    const float s = scale_input<Apply>(S::load(in.v[j]), scj);
    vals[j] = round_element<Round, Clamp>(s, f, rule, static_cast<uint64_t>(i + j), job.seed);
    outs[j] = unscale_element<Apply>(vals[j], scj.scale, g);
    if constexpr (!kPairs) out.v[j] = S::store(outs[j]);
  }
  if constexpr (kPairs) {
    uint32_t* words = reinterpret_cast<uint32_t*>(out.v);
#pragma unroll
    for (int w = 0; w < V / 2; ++w) {
      words[w] = (S::pack2(outs[2 * w], outs[2 * w + 1]) & ~nan.halves[w]) | (S::kNaN2 & nan.halves[w]);
    }
  }
  if (job.out != nullptr) {
    store_vec<T, V>(static_cast<T*>(job.out) + i, out);
    if (job.mask != nullptr) {  // the scaled input again (the same product): no work where no mask is asked
      Vec<uint8_t, V> inside;  // the mask's bytes, built a word at a time (one select an element)
      uint32_t* inside_words = reinterpret_cast<uint32_t*>(inside.v);
      if constexpr (V % 4 == 0) {
#pragma unroll
        for (int w = 0; w < V / 4; ++w) inside_words[w] = 0;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const bool in_range = within_range(scale_input<Apply>(S::load(in.v[j]), sc[PerElementScale ? j : 0]), f);
        if constexpr (V % 4 == 0) inside_words[j / 4] |= in_range ? 1u << (8 * (j % 4)) : 0u;
        else inside.v[j] = in_range ? 1 : 0;
      }
      store_vec<uint8_t, V>(job.mask + i, inside);
    }
  }
  if (job.codes == nullptr) return;
  if (job.code_type == kCodeUInt8 || job.code_type == kCodeInt8) {
    Vec<uint8_t, V> bytes;
    if constexpr (Clamp && V % 4 == 0) {  // finite encoders, then a NaN block's codes (one branch a run)
      if (f.is_float) {
#pragma unroll
        for (int j = 0; j < V; ++j) bytes.v[j] = static_cast<uint8_t>(encode_finite_float_element(vals[j], f));
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) bytes.v[j] = static_cast<uint8_t>(encode_finite_int_element(vals[j], f));
      }
      const uint32_t nan_code = (f.is_float ? static_cast<uint8_t>(f.nan_code_or_0) : 0u) * 0x01010101u;
      uint32_t* words = reinterpret_cast<uint32_t*>(bytes.v);
#pragma unroll
      for (int w = 0; w < V / 4; ++w) words[w] = (words[w] & ~nan.bytes[w]) | (nan_code & nan.bytes[w]);
    } else if (f.is_float) {  // uniform: one branch a run, not one an element
#pragma unroll
      for (int j = 0; j < V; ++j) bytes.v[j] = static_cast<uint8_t>(encode_float_element(vals[j], f));
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) bytes.v[j] = static_cast<uint8_t>(encode_int_element(vals[j], f));
    }
    store_vec<uint8_t, V>(static_cast<uint8_t*>(job.codes) + code_at, bytes);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) store_code(job, code_at + j, encode_element(vals[j], f));
  }
}

// The larger of each 16-bit half of a and b (one instruction on the card).
__device__ __forceinline__ uint32_t max_halves(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vmaxu2(a, b);
#else
  return max(a & 0xFFFFu, b & 0xFFFFu) | max(a & 0xFFFF0000u, b & 0xFFFF0000u);
#endif
}

// Largest |x| bits of the run `in` of V elements (16-bit types: two elements a word at a time).
template <class S, int V>
__device__ __forceinline__ uint32_t amax_run(const Vec<typename S::T, V>& in) {
  if constexpr (sizeof(typename S::T) == 2 && V % 2 == 0) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(in.v);
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < V / 2; ++w) m = max_halves(m, words[w] & 0x7FFF7FFFu);
    return max(m & 0xFFFFu, m >> 16);
  } else {
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) m = max(m, S::abs_bits(in.v[j]));
    return m;
  }
}

// The scale of a block whose scale applies by Apply: power-of-two scales (kApplyInv) are exactly the
// exponent scale kind (make_job pairs the rule with the kind), so those kernels compile that kind
// alone, and OCP's floor rule (a uniform branch) without the other rules' terms; two-level scales
// (a tensor scale) are exactly the minifloat kind (scale_fields_error refuses a tensor scale with
// any other before dispatch); the single-level float-valued kinds go through the one run-time
// switch (block_scale).
template <int Apply>
__device__ __forceinline__ BlockScale block_scale_for(uint32_t amax_bits, const FormatParams& f, int32_t mode,
                                                      float g) {
  if constexpr (Apply == kApplyInv) {
    return mode == kScaleFloor ? pow2_block_scale<kScaleFloor>(amax_bits, f, mode)
                               : pow2_block_scale(amax_bits, f, mode);
  } else if constexpr (Apply == kApplyTwoLevel) {
    return float_block_scale_as<kScaleMinifloat>(amax_bits, f, g);
  } else {
    return block_scale(amax_bits, f, mode, g);
  }
}

// The code of a padding position (input 0) in a block with scale sc.
template <int Apply>
__device__ __forceinline__ int32_t padding_code(const FormatParams& f, const RoundRule& rule, const BlockScale& sc) {
  const float s = scale_input<Apply>(0.0f, sc);
  return encode_element(quantize_element(s, f, rule, rule.threshold), f);
}

// The walk of both kernels: groups of 2^group_log2 lanes, one an item of `total`, a warp's groups
// on neighbouring items, warp by warp over the grid (uniform across a warp, so that its shuffles
// see every lane): for (t = first; t < tiles; t += stride) the lane's item is item(t, lane).
struct GroupWalk {
  int group_log2, per_warp_log2;
  int64_t tiles, first, stride;
  __device__ GroupWalk(int64_t total, int group_log2_)
      : group_log2(group_log2_),
        per_warp_log2(5 - group_log2_),
        tiles((total + (int64_t{1} << (5 - group_log2_)) - 1) >> (5 - group_log2_)),
        first((static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5),
        stride((static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5) {}
  __device__ int64_t item(int64_t tile, int lane) const { return (tile << per_warp_log2) + (lane >> group_log2); }
};

// Runs of a block one lane of the last-dim kernel holds in registers: its loads are in flight
// together, and a block of up to kHeldRuns runs is one lane's (no shuffles, one block scale a lane
// for all its elements: an MX block of bfloat16 is 4 runs of 8).
constexpr int kHeldRuns = 4;

// How the last-dim kernel's lanes split the blocks (worked out once, on the host).
struct RowsLaunch {
  int group_log2;     // log2 of the lanes a block: a power of two <= 32
  bool whole_blocks;  // dim_size is a multiple of block_size: block b starts at b * block_size
  bool held;          // block_size <= lanes * V * kHeldRuns: a lane's runs of a block stay in registers
};

// Grouping along the last dim: 2^group_log2 lanes own one block, lane `sub` its runs sub, sub +
// lanes, ... of V elements (V > 1 only where the launch checked that every block and row starts on
// a multiple of V and the pointers are 16-byte aligned); the block's amax is reduced over the group
// with shuffles, then the lanes quantize their runs (held: the runs loaded for the amax, from
// registers; else each run read again, from L1). Rows of whole blocks need no division.
template <class S, int V, int Round, int Apply, bool Clamp>
__global__ void __launch_bounds__(kThreads) rows_kernel(const Job job, const RowsLaunch launch) {
  using T = typename S::T;
  const FormatParams f = job.fmt;
  const RoundRule rule = round_rule(job.rounding);
  const float g = tensor_scale_of(job);
  const int group = 1 << launch.group_log2;
  const int lane = threadIdx.x & 31;
  const int sub = lane & (group - 1);
  const int64_t step = static_cast<int64_t>(group) * V;
  const int64_t k = job.num_blocks, bs = job.block_size, dim = job.dim_size;
  const int64_t total = job.outer * k;
  const GroupWalk walk(total, launch.group_log2);
  for (int64_t wt = walk.first; wt < walk.tiles; wt += walk.stride) {
    const int64_t b = walk.item(wt, lane);
    const bool valid = b < total;
    int64_t start = b * bs, len = bs;
    if (!launch.whole_blocks) {
      const int64_t o = valid ? b / k : 0, kb = valid ? b - o * k : 0;
      start = o * dim + kb * bs;
      len = min(bs, dim - kb * bs);
    }
    len = valid ? len : 0;
    const int64_t t0 = static_cast<int64_t>(sub) * V;
    Vec<T, V> held[kHeldRuns];
    uint32_t m = 0;
    if (launch.held) {
#pragma unroll
      for (int r = 0; r < kHeldRuns; ++r) {  // every load first: all in flight at once
        if (t0 + r * step < len) held[r] = load_run<T, V>(job, start + t0 + r * step);
      }
#pragma unroll
      for (int r = 0; r < kHeldRuns; ++r) {
        if (t0 + r * step < len) m = max(m, amax_run<S, V>(held[r]));
      }
    } else {
      for (int64_t t = t0; t < len; t += step) m = max(m, amax_run<S, V>(load_run<T, V>(job, start + t)));
    }
    for (int off = group >> 1; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off, group));
    if (!valid) continue;
    const BlockScale sc = block_scale_for<Apply>(S::widen_abs(m), f, job.scale_mode, g);
    if (sub == 0 && job.scale != nullptr) job.scale[b] = sc.scale;
    if (sub == 0 && job.scale_codes != nullptr) job.scale_codes[b] = sc.code;
    const RunNaN<V> nan = run_nan_of<V, false>(&sc);
    if (launch.held) {
#pragma unroll
      for (int r = 0; r < kHeldRuns; ++r) {
        const int64_t t = t0 + r * step;
        if (t < len) quantize_run<S, V, Round, Apply, false, Clamp>(job, f, rule, &sc, nan, g, held[r], start + t, b * bs + t);
      }
    } else {
      for (int64_t t = t0; t < len; t += step) {
        quantize_run<S, V, Round, Apply, false, Clamp>(job, f, rule, &sc, nan, g, load_run<T, V>(job, start + t), start + t,
                                                       b * bs + t);
      }
    }
    if (job.codes != nullptr && len < bs) {
      const int32_t code = padding_code<Apply>(f, rule, sc);
      for (int64_t t = len + sub; t < bs; t += group) store_code(job, b * bs + t, code);
    }
  }
}

// Rows of a block one lane of the column kernel holds in registers (V columns each): its loads are
// in flight together and the block is read from memory once.
constexpr int kHeldRows = 8;

// How the column kernel's lanes split the (block, run of V columns) pairs (worked out on the host).
struct ColumnsLaunch {
  int group_log2;  // log2 of the lanes a pair: a power of two <= 32
  bool held;       // block_size <= lanes * kHeldRows: a lane's rows of a block stay in registers
};

// The column kernel's amax words: a 16-bit type's V columns two a word (each half the larger |x|
// bits of its column), else one a word.
template <class S, int V>
constexpr int kColumnWords = sizeof(typename S::T) == 2 && V % 2 == 0 ? V / 2 : V;

// m[w] = the larger |x| bits, column by column, of m and the run `in` of V neighbouring columns.
template <class S, int V>
__device__ __forceinline__ void column_amax(uint32_t* m, const Vec<typename S::T, V>& in) {
  if constexpr (kColumnWords<S, V> != V) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(in.v);
#pragma unroll
    for (int w = 0; w < V / 2; ++w) m[w] = max_halves(m[w], words[w] & 0x7FFF7FFFu);
  } else {
#pragma unroll
    for (int q = 0; q < V; ++q) m[q] = max(m[q], S::abs_bits(in.v[q]));
  }
}

// The larger of a and b per column word (two 16-bit columns a word where kColumnWords says so).
template <class S, int V>
__device__ __forceinline__ uint32_t column_max(uint32_t a, uint32_t b) {
  return kColumnWords<S, V> != V ? max_halves(a, b) : max(a, b);
}

// Column q's |x| bits of the amax words m.
template <class S, int V>
__device__ __forceinline__ uint32_t column_bits(const uint32_t* m, int q) {
  return kColumnWords<S, V> != V ? (m[q / 2] >> (16 * (q % 2))) & 0xFFFFu : m[q];
}

// a / b for a, b >= 0, through the 32-bit division where both fit (the common case: a few
// instructions, against the 64-bit division's routine).
__device__ __forceinline__ int64_t div_index(int64_t a, int64_t b) {
  if (((a | b) >> 32) == 0) return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
  return a / b;
}

// Grouping along another dim (inner > 1): 2^group_log2 lanes own one (block, run of V neighbouring
// columns) pair, lane `sub` the block's rows sub, sub + lanes, ... (V > 1 where inner is a multiple
// of V and the pointers are aligned). Lanes of neighbouring pairs read neighbouring runs of a row
// (coalesced); each column's amax is reduced over the pair's lanes with shuffles, then the lanes
// quantize their rows (held: from registers; else each row read again).
template <class S, int V, int Round, int Apply, bool Clamp>
__global__ void __launch_bounds__(kThreads) columns_kernel(const Job job, const ColumnsLaunch launch) {
  using T = typename S::T;
  constexpr int kWords = kColumnWords<S, V>;
  const FormatParams f = job.fmt;
  const RoundRule rule = round_rule(job.rounding);
  const float g = tensor_scale_of(job);
  const int group = 1 << launch.group_log2;
  const int lane = threadIdx.x & 31;
  const int sub = lane & (group - 1);
  const int64_t k = job.num_blocks, bs = job.block_size, dim = job.dim_size, inner = job.inner;
  const int64_t runs = inner / V;
  const int64_t total = job.outer * k * runs;
  const int64_t row_step = static_cast<int64_t>(group) * inner;  // between a lane's rows, in elements
  const GroupWalk walk(total, launch.group_log2);
  for (int64_t wt = walk.first; wt < walk.tiles; wt += walk.stride) {
    const int64_t p = walk.item(wt, lane);
    const bool valid = p < total;
    const int64_t ob = valid ? div_index(p, runs) : 0, c = (p - ob * runs) * V;
    const int64_t o = div_index(ob, k), kb = ob - o * k;
    const int64_t j0 = kb * bs, len = valid ? min(bs, dim - j0) : 0;
    const int64_t base = (o * dim + j0 + sub) * inner + c;  // the lane's first row
    Vec<T, V> held[kHeldRows];
    uint32_t m[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w) m[w] = 0;
    // the lane's rows of the block (held: at most kHeldRows), counted once
    const int rows = len > sub ? static_cast<int>((len - sub + group - 1) >> launch.group_log2) : 0;
    if (launch.held) {
#pragma unroll
      for (int r = 0; r < kHeldRows; ++r) {  // every load first: all in flight at once
        if (r < rows) held[r] = load_run<T, V>(job, base + r * row_step);
      }
#pragma unroll
      for (int r = 0; r < kHeldRows; ++r) {
        if (r < rows) column_amax<S, V>(m, held[r]);
      }
    } else {
      for (int64_t j = sub, at = base; j < len; j += group, at += row_step) column_amax<S, V>(m, load_run<T, V>(job, at));
    }
    for (int off = group >> 1; off > 0; off >>= 1) {
#pragma unroll
      for (int w = 0; w < kWords; ++w) m[w] = column_max<S, V>(m[w], __shfl_xor_sync(0xFFFFFFFFu, m[w], off, group));
    }
    if (!valid) continue;
    BlockScale sc[V];
#pragma unroll
    for (int q = 0; q < V; ++q) {
      sc[q] = block_scale_for<Apply>(S::widen_abs(column_bits<S, V>(m, q)), f, job.scale_mode, g);
      if (sub == 0 && job.scale != nullptr) job.scale[ob * inner + c + q] = sc[q].scale;
      if (sub == 0 && job.scale_codes != nullptr) job.scale_codes[ob * inner + c + q] = sc[q].code;
    }
    const RunNaN<V> nan = run_nan_of<V, true>(sc);
    const int64_t code_base = (ob * bs + sub) * inner + c;  // the codes of the lane's first row
    if (launch.held) {
#pragma unroll
      for (int r = 0; r < kHeldRows; ++r) {
        if (r < rows) {
          quantize_run<S, V, Round, Apply, true, Clamp>(job, f, rule, sc, nan, g, held[r], base + r * row_step,
                                                        code_base + r * row_step);
        }
      }
    } else {
      int64_t at = base, code_at = code_base;
      for (int64_t j = sub; j < len; j += group, at += row_step, code_at += row_step) {
        quantize_run<S, V, Round, Apply, true, Clamp>(job, f, rule, sc, nan, g, load_run<T, V>(job, at), at,
                                                      code_at);
      }
    }
    if (job.codes != nullptr && len < bs) {
      const int64_t pad_base = ob * bs * inner + c;
#pragma unroll
      for (int q = 0; q < V; ++q) {
        const int32_t code = padding_code<Apply>(f, rule, sc[q]);
        for (int64_t j = len + sub; j < bs; j += group) store_code(job, pad_base + j * inner + q, code);
      }
    }
  }
}

int64_t grid_for(int64_t threads) {
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  return blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// Whether pointer p is a multiple of `bytes` (null pointers, outputs not asked for, pass).
bool aligned(const void* p, int64_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Elements of a run: the last-dim kernel's 16 bytes of input; the column kernel's 4 elements (8
// bytes of a 16-bit type, 16 of float32), so that a lane's kHeldRows rows of an MX block are 32
// elements, as a last-dim lane's block (more would hold twice the registers and code).
template <class S>
constexpr int kRowsV = 16 / static_cast<int>(sizeof(typename S::T));
template <class S>
constexpr int kColumnsV = 4;

// Whether the job allows runs of V elements: every run it reads starts on a multiple of V (n: the
// dim the runs lie along, in elements; m: what every run start is a multiple of besides) and every
// pointer it streams through is aligned to a run.
template <class S, int V>
bool vector_runs(const Job& job, int64_t n, int64_t m) {
  constexpr int64_t kBytes = V * static_cast<int64_t>(sizeof(typename S::T));
  return n % V == 0 && m % V == 0 && aligned(job.x, kBytes) && aligned(job.out, kBytes) && aligned(job.mask, V) &&
         aligned(job.codes, V);
}

// The last-dim kernel's split for V elements a run: lanes a block the next power of two >= block_size
// / (V * kHeldRuns), at most 32.
template <int V>
RowsLaunch rows_launch(const Job& job) {
  RowsLaunch r{5, job.dim_size % job.block_size == 0, false};
  while (r.group_log2 > 0 && (int64_t{1} << (r.group_log2 - 1)) * V * kHeldRuns >= job.block_size) --r.group_log2;
  r.held = job.block_size <= (int64_t{1} << r.group_log2) * V * kHeldRuns;
  return r;
}

// The column kernel's split: lanes a (block, run) pair the next power of two >= block_size /
// kHeldRows, at most 32.
ColumnsLaunch columns_launch(const Job& job) {
  ColumnsLaunch c{5, false};
  while (c.group_log2 > 0 && (int64_t{1} << (c.group_log2 - 1)) * kHeldRows >= job.block_size) --c.group_log2;
  c.held = job.block_size <= (int64_t{1} << c.group_log2) * kHeldRows;
  return c;
}

template <class S, int V, int Round, int Apply, bool Clamp>
void launch_rows(const Job& job, cudaStream_t stream) {
  const RowsLaunch r = rows_launch<V>(job);
  const int64_t per_warp = int64_t{32} >> r.group_log2;
  const int64_t warps = (job.outer * job.num_blocks + per_warp - 1) / per_warp;
  const auto blocks = static_cast<unsigned>(grid_for(warps * 32));
  rows_kernel<S, V, Round, Apply, Clamp><<<blocks, kThreads, 0, stream>>>(job, r);
}

template <class S, int V, int Round, int Apply, bool Clamp>
void launch_columns(const Job& job, cudaStream_t stream) {
  const ColumnsLaunch c = columns_launch(job);
  const int64_t per_warp = int64_t{32} >> c.group_log2;
  const int64_t warps = (job.outer * job.num_blocks * (job.inner / V) + per_warp - 1) / per_warp;
  const auto blocks = static_cast<unsigned>(grid_for(warps * 32));
  columns_kernel<S, V, Round, Apply, Clamp><<<blocks, kThreads, 0, stream>>>(job, c);
}

// The vector kernels saturate by the clamp where the format allows it (FormatParams::clamps), in
// kernels of their own (a run-time branch would hold both element loops' registers); the
// one-element kernels, for inputs the vector ones cannot take, by the selects for every format.
// Last dim: runs lie along rows (dim_size) and start at multiples of block_size; other dims: runs
// lie along the inner columns.
template <class S, int Round, int Apply>
void launch(const Job& job, cudaStream_t stream) {
  constexpr int kR = kRowsV<S>, kC = kColumnsV<S>;
  if (job.inner == 1) {
    if (!vector_runs<S, kR>(job, job.dim_size, job.block_size)) launch_rows<S, 1, Round, Apply, false>(job, stream);
    else if (job.fmt.clamps) launch_rows<S, kR, Round, Apply, true>(job, stream);
    else launch_rows<S, kR, Round, Apply, false>(job, stream);
  } else {
    if (!vector_runs<S, kC>(job, job.inner, 0)) launch_columns<S, 1, Round, Apply, false>(job, stream);
    else if (job.fmt.clamps) launch_columns<S, kC, Round, Apply, true>(job, stream);
    else launch_columns<S, kC, Round, Apply, false>(job, stream);
  }
}

template <class S, int Round>
void dispatch_apply(const Job& job, cudaStream_t stream) {
  switch (job.scale_apply()) {
    case kApplyInv: launch<S, Round, kApplyInv>(job, stream); break;
    case kApplyTwoLevel: launch<S, Round, kApplyTwoLevel>(job, stream); break;
    default: launch<S, Round, kApplyDiv>(job, stream); break;
  }
}

template <class S>
void dispatch(const Job& job, cudaStream_t stream) {
  switch (round_kind(job.rounding)) {
    case kKindEven: dispatch_apply<S, kKindEven>(job, stream); break;
    case kKindStochastic: dispatch_apply<S, kKindStochastic>(job, stream); break;
    default: dispatch_apply<S, kKindRule>(job, stream); break;
  }
}

// The tensor-scale call: one thread (a scalar from two scalars on the device).
__global__ void tensor_scale_kernel(const TensorScaleJob job) { run_tensor_scale(job); }

}  // namespace

int run_tensor_scale_cuda(const TensorScaleJob& job, void* stream) {
  tensor_scale_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(job);
  return static_cast<int>(cudaGetLastError());
}

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
