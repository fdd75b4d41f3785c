// CPU kernels of group-wise fake-quant / quantize: ATen's OpenMP parallel_for over blocks, and
// inner loops over contiguous spans that the compiler vectorizes (no per-element branches; dtype,
// rounding kind and how the scale applies (ScaleApply) are template parameters).
//
// Work is cut into tiles: for the last-dim case (inner == 1) a tile is a run of consecutive blocks
// of at most kTile elements (contiguous in memory, across rows too; with codes, a run ends after a
// block whose codes are padded); for grouping along a leading or middle dim (inner > 1) a tile is
// one block of rows times a chunk of at most kColumns contiguous columns, and every loop runs along
// the columns. Per tile: amax of each block from the
// bits (integer max; for inner > 1 a running max per column over the block's rows), the blocks'
// shared scales in one loop, then one pass over the elements (the tile still in cache) that
// quantizes and stores.
//
// Results never depend on the thread's floating-point mode: each parallel chunk clears
// flush-to-zero / denormals-are-zero (torch.set_flush_denormal(True) sets both) while it runs and
// restores the caller's mode after, so subnormal inputs, scales and results are kept, as in the
// reference.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "cpu_utils.h"  // KeepDenormals
#include "group_quant.h"
#include "group_quant_job.h"

namespace groupquant {
namespace {

constexpr int64_t kTile = 2048;          // elements per tile (three float buffers of it stay in L1)
constexpr int64_t kColumns = 1024;       // columns per work item when grouping along a leading dim
constexpr int64_t kGrainElements = 1 << 15;  // elements per parallel task, at least

// ---- storage types: how to load, store and take |x| bits ---------------------------------------

struct F32 {
  using T = float;
  using Bits = uint32_t;  // holds abs_bits
  static float load(T v) { return v; }
  static T store(float v) { return v; }
  static uint32_t abs_bits(T v) { return f2u(v) & 0x7FFFFFFFu; }
  static uint32_t widen_abs(uint32_t a) { return a; }  // abs_bits -> float32 bits of |x|
};

struct BF16 {
  using T = uint16_t;
  using Bits = uint16_t;
  static float load(T v) { return bf16_bits_to_float(v); }
  static T store(float v) { return float_to_bf16_bits(v); }
  static uint32_t abs_bits(T v) { return v & 0x7FFFu; }
  static uint32_t widen_abs(uint32_t a) { return a << 16; }
};

struct F16 {
  using T = uint16_t;
  using Bits = uint16_t;
  static float load(T v) { return fp16_bits_to_float(v); }
  static T store(float v) { return float_to_fp16_bits(v); }
  static uint32_t abs_bits(T v) { return v & 0x7FFFu; }  // ordered like |x| (NaN above Inf)
  static uint32_t widen_abs(uint32_t a) { return f2u(fp16_bits_to_float(static_cast<uint16_t>(a))); }
};

// ---- span loops --------------------------------------------------------------------------------

enum OutKind : int { kOutDequant = 0, kOutDequantMask = 1, kOutValues = 2 };

// Largest |x| of n contiguous elements, as float32 bits (NaN/Inf give >= 0x7F800000).
template <class S>
uint32_t amax_span(const typename S::T* __restrict x, int64_t n) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = std::max(m, S::abs_bits(x[i]));
  return S::widen_abs(m);
}

// Largest |x| of each of nb consecutive blocks of BS elements (float32 bits), BS known at compile
// time so that a block's loop is whole vectors (16 bfloat16 values are half of an AVX-512 register:
// with the length unknown, such a loop ran one element at a time).
template <class S, int BS>
void amax_blocks_of(const typename S::T* __restrict x, int64_t nb, uint32_t* __restrict amax) {
  using Bits = typename S::Bits;  // the max in the storage's width: 16 lanes of 16 bits, not of 32
  for (int64_t t = 0; t < nb; ++t) {
    Bits m = 0;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < BS; ++i) m = std::max(m, static_cast<Bits>(S::abs_bits(x[t * BS + i])));
    amax[t] = S::widen_abs(m);
  }
}

// Largest |x| of each of nb consecutive blocks of bs elements (float32 bits); NVFP4's and MX's
// block sizes (16, 32) take the loops of amax_blocks_of.
template <class S>
void amax_blocks(const typename S::T* x, int64_t nb, int64_t bs, uint32_t* amax) {
  switch (bs) {
    case 16: amax_blocks_of<S, 16>(x, nb, amax); break;
    case 32: amax_blocks_of<S, 32>(x, nb, amax); break;
    default:
      for (int64_t t = 0; t < nb; ++t) amax[t] = amax_span<S>(x + t * bs, bs);
  }
}

// Quantize n contiguous elements, element i with scale[i] / inv[i] (and the per-tensor g, two-level);
// writes by Out: out (x's dtype, dequantized) [+ mask], or vals (float32 element values).
template <class S, int Kind, int Apply, int Out>
void quant_span(const typename S::T* __restrict x, int64_t n, const float* __restrict scale,
                const float* __restrict inv, float g, const FormatParams& fmt, int32_t rounding, uint64_t idx0,
                uint32_t seed, typename S::T* __restrict out, uint8_t* __restrict mask, float* __restrict vals) {
  const FormatParams f = fmt;
  const RoundRule rule = round_rule(rounding);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xv = S::load(x[i]);
    const float s = Apply == kApplyDiv ? xv / scale[i] : xv * inv[i];
    const float v = round_element<Kind>(s, f, rule, idx0 + static_cast<uint64_t>(i), seed);
    if (Out == kOutValues) {
      vals[i] = v;
    } else {
      out[i] = S::store(unscale_element<Apply>(v, scale[i], g));
      if (Out == kOutDequantMask) mask[i] = within_range(s, f) ? 1 : 0;
    }
  }
}

template <typename C>
void encode_span(const float* __restrict vals, int64_t n, const FormatParams& fmt, C* __restrict codes) {
  const FormatParams f = fmt;
  if (f.is_float) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<C>(encode_float_element(vals[i], f));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<C>(encode_int_element(vals[i], f));
  }
}

void encode_any(const float* vals, int64_t n, const Job& job, int64_t offset) {
  switch (job.code_type) {
    case kCodeInt8: encode_span(vals, n, job.fmt, static_cast<int8_t*>(job.codes) + offset); break;
    case kCodeInt16: encode_span(vals, n, job.fmt, static_cast<int16_t*>(job.codes) + offset); break;
    case kCodeInt32: encode_span(vals, n, job.fmt, static_cast<int32_t*>(job.codes) + offset); break;
    default: encode_span(vals, n, job.fmt, static_cast<uint8_t*>(job.codes) + offset); break;
  }
}

// The element value a padding position (input 0) gets in a block with this scale (its noise
// does not matter: 0 has no fraction, and NaN stays NaN).
template <int Apply>
float padding_value(const BlockScale& sc, const Job& job) {
  const float s = scale_input<Apply>(0.0f, sc);
  const RoundRule rule = round_rule(job.rounding);
  return quantize_element(s, job.fmt, rule, rule.threshold);
}

// Shared scales of n blocks in scale format Kind from their amax (float32 bits of |x|): scale, inv
// and the scale format's code per block (block_scale_as), a loop that vectorizes (no per-block branches).
template <int32_t Kind>
void block_scales_as(const uint32_t* __restrict amax, int64_t n, const FormatParams& fmt, int32_t mode, float g,
                     float* __restrict scale, float* __restrict inv, uint8_t* __restrict code) {
  const FormatParams f = fmt;
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) {
    const BlockScale sc = block_scale_as<Kind>(amax[t], f, mode, g);
    scale[t] = sc.scale;
    inv[t] = sc.inv;
    code[t] = sc.code;
  }
}

// block_scales_as for the job's scale kind, chosen once for the n blocks (dispatch_scale_kind).
void block_scales(const uint32_t* __restrict amax, int64_t n, const Job& job, float* __restrict scale,
                  float* __restrict inv, uint8_t* __restrict code) {
  const int32_t mode = job.scale_mode;
  const float g = job.g();
  dispatch_scale_kind(job.fmt.scale_kind, [&](auto kind) {
    block_scales_as<decltype(kind)::value>(amax, n, job.fmt, mode, g, scale, inv, code);
  });
}

// ---- drivers -----------------------------------------------------------------------------------

template <class S, int Kind, int Apply>
struct Driver {
  using T = typename S::T;

  static void span(const Job& job, int64_t offset, int64_t n, const float* scale, const float* inv, float* vals) {
    const T* x = static_cast<const T*>(job.x) + offset;
    const uint64_t idx = static_cast<uint64_t>(offset);
    if (job.codes != nullptr) {
      quant_span<S, Kind, Apply, kOutValues>(x, n, scale, inv, job.g(), job.fmt, job.rounding, idx, job.seed, nullptr,
                                                 nullptr, vals);
    } else if (job.mask != nullptr) {
      quant_span<S, Kind, Apply, kOutDequantMask>(x, n, scale, inv, job.g(), job.fmt, job.rounding, idx, job.seed,
                                                      static_cast<T*>(job.out) + offset, job.mask + offset, nullptr);
    } else {
      quant_span<S, Kind, Apply, kOutDequant>(x, n, scale, inv, job.g(), job.fmt, job.rounding, idx, job.seed,
                                                  static_cast<T*>(job.out) + offset, nullptr, nullptr);
    }
  }

  static void fill(float* buf, int64_t n, float v) {
    for (int64_t i = 0; i < n; ++i) buf[i] = v;
  }

  // The codes of the padding positions of a short block (bs - len of them, from code index at),
  // each the code of an input 0 in a block with scale sc.
  static void pad_codes(const Job& job, const BlockScale& sc, int64_t len, int64_t at, float* vals) {
    const int64_t bs = job.block_size;
    fill(vals, std::min(bs - len, kTile), padding_value<Apply>(sc, job));
    for (int64_t off = len; off < bs; off += kTile) encode_any(vals, std::min(kTile, bs - off), job, at + off - len);
  }

  // Grouping along the last dim (inner == 1), fake-quant and quantize: a work item is a run of
  // consecutive blocks of at most kTile elements (contiguous in x, across rows too): amax of each
  // block, their scales in one loop over the blocks (which vectorizes), then one pass over the
  // run's elements. Block b's codes start at b * block_size, so with codes a run ends after a short
  // block (the last of a row, whose padding codes follow it). A block longer than kTile is done
  // alone, in chunks.
  static void rows(const Job& job) {
    const int64_t bs = job.block_size, k = job.num_blocks, dim = job.dim_size;
    const int64_t total = job.outer * k;
    const int64_t grain = std::max<int64_t>(1, kGrainElements / bs);
    const bool codes = job.codes != nullptr;
    at::parallel_for(0, total, grain, [&](int64_t b0, int64_t b1) {
      const KeepDenormals keep;
      alignas(64) float scale_buf[kTile];
      alignas(64) float inv_buf[kTile];
      alignas(64) float vals[kTile];
      alignas(64) uint32_t amax_blk[kTile];
      alignas(64) int32_t len_blk[kTile];
      alignas(64) float scale_blk[kTile];
      alignas(64) float inv_blk[kTile];
      alignas(64) uint8_t code_blk[kTile];
      const T* x = static_cast<const T*>(job.x);
      int64_t o = b0 / k, kb = b0 % k;
      int64_t b = b0;
      while (b < b1) {
        const int64_t start = o * dim + kb * bs;  // first element of the run in x
        const int64_t b_first = b;                // first block of the run (its scale's index)
        int64_t len = std::min(bs, dim - kb * bs);
        if (len > kTile) {  // one large block, in chunks
          const BlockScale sc = block_scale(amax_span<S>(x + start, len), job.fmt, job.scale_mode, job.g());
          if (job.scale != nullptr) job.scale[b_first] = sc.scale;
          if (job.scale_codes != nullptr) job.scale_codes[b_first] = sc.code;
          fill(scale_buf, kTile, sc.scale);
          fill(inv_buf, kTile, sc.inv);
          for (int64_t off = 0; off < len; off += kTile) {
            const int64_t n = std::min(kTile, len - off);
            span(job, start + off, n, scale_buf, inv_buf, vals);
            if (codes) encode_any(vals, n, job, b_first * bs + off);
          }
          if (codes && len < bs) pad_codes(job, sc, len, b_first * bs + len, vals);
          ++b;
          if (++kb == k) { kb = 0; ++o; }
          continue;
        }
        int64_t filled = 0, nb = 0, whole = 0;  // whole: the leading blocks of bs elements
        bool short_last = false;
        while (b < b1 && filled + len <= kTile && !short_last) {
          whole += (whole == nb && len == bs) ? 1 : 0;
          len_blk[nb++] = static_cast<int32_t>(len);
          filled += len;
          short_last = codes && len < bs;
          ++b;
          if (++kb == k) { kb = 0; ++o; }
          len = std::min(bs, dim - kb * bs);
        }
        amax_blocks<S>(x + start, whole, bs, amax_blk);
        for (int64_t t = whole, off = whole * bs; t < nb; off += len_blk[t], ++t) {
          amax_blk[t] = amax_span<S>(x + start + off, len_blk[t]);
        }
        block_scales(amax_blk, nb, job, scale_blk, inv_blk, code_blk);
        if (job.scale != nullptr) std::copy(scale_blk, scale_blk + nb, job.scale + b_first);
        if (job.scale_codes != nullptr) std::copy(code_blk, code_blk + nb, job.scale_codes + b_first);
        for (int64_t t = 0, off = 0; t < nb; off += len_blk[t], ++t) {
          fill(scale_buf + off, len_blk[t], scale_blk[t]);
          if (Apply != kApplyDiv) fill(inv_buf + off, len_blk[t], inv_blk[t]);
        }
        span(job, start, filled, scale_buf, inv_buf, vals);
        if (codes) {
          encode_any(vals, filled, job, b_first * bs);
          if (short_last) {
            const BlockScale sc{scale_blk[nb - 1], inv_blk[nb - 1], 0};
            pad_codes(job, sc, len_blk[nb - 1], b_first * bs + filled, vals);
          }
        }
      }
    });
  }

  // Grouping along a leading or middle dim (inner > 1), fake-quant and quantize. A work item is one
  // block of rows (the block_size rows of one group along the grouped dim) times a chunk of at most
  // kColumns contiguous columns; work is split over (outer, block row, column chunk). Pass 1
  // streams the item's rows and keeps a running amax per column; the columns' scales follow in one
  // vectorized loop; pass 2 streams the same rows again while they are still in cache and quantizes
  // them along the contiguous columns. Every inner loop runs over contiguous memory.
  static void columns(const Job& job) {
    const int64_t bs = job.block_size, k = job.num_blocks, dim = job.dim_size, inner = job.inner;
    const int64_t chunk = std::min(inner, kColumns);
    const int64_t chunks = (inner + chunk - 1) / chunk;
    const int64_t total = job.outer * k * chunks;
    const int64_t grain = std::max<int64_t>(1, kGrainElements / (bs * chunk));
    at::parallel_for(0, total, grain, [&](int64_t i0, int64_t i1) {
      const KeepDenormals keep;
      alignas(64) uint32_t amax_buf[kColumns];
      alignas(64) float scale_buf[kColumns];
      alignas(64) float inv_buf[kColumns];
      alignas(64) uint8_t code_buf[kColumns];
      alignas(64) float vals[kColumns];
      const T* x = static_cast<const T*>(job.x);
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t cc = item % chunks, ob = item / chunks;
        const int64_t o = ob / k, kb = ob % k;
        const int64_t c0 = cc * chunk, cols = std::min(chunk, inner - c0);
        const int64_t j0 = kb * bs, len = std::min(bs, dim - j0);
        const int64_t base = (o * dim + j0) * inner + c0;  // first element in x
        const int64_t scale_at = ob * inner + c0;          // first scale
        const int64_t code_base = ob * bs * inner + c0;    // first code
        // pass 1: running amax per column over the block's rows
        std::fill(amax_buf, amax_buf + cols, 0u);
        for (int64_t j = 0; j < len; ++j) {
          const T* row = x + base + j * inner;
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) amax_buf[c] = std::max(amax_buf[c], S::abs_bits(row[c]));
        }
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) amax_buf[c] = S::widen_abs(amax_buf[c]);
        block_scales(amax_buf, cols, job, scale_buf, inv_buf, code_buf);
        if (job.scale != nullptr) std::copy(scale_buf, scale_buf + cols, job.scale + scale_at);
        if (job.scale_codes != nullptr) std::copy(code_buf, code_buf + cols, job.scale_codes + scale_at);
        // pass 2: the same rows again, quantized along the columns
        for (int64_t j = 0; j < len; ++j) {
          span(job, base + j * inner, cols, scale_buf, inv_buf, vals);
          if (job.codes != nullptr) encode_any(vals, cols, job, code_base + j * inner);
        }
        if (job.codes != nullptr && len < bs) {  // padding rows of the last block: codes of 0
          for (int64_t c = 0; c < cols; ++c) vals[c] = padding_value<Apply>(BlockScale{scale_buf[c], inv_buf[c], 0}, job);
          for (int64_t j = len; j < bs; ++j) encode_any(vals, cols, job, code_base + j * inner);
        }
      }
    });
  }

  static void run(const Job& job) {
    if (job.inner > 1) columns(job);
    else rows(job);
  }
};

// ---- run-time -> compile-time dispatch ----------------------------------------------------------

template <class S, int Kind>
void dispatch_scale(const Job& job) {
  switch (job.scale_apply()) {
    case kApplyInv: Driver<S, Kind, kApplyInv>::run(job); break;
    case kApplyTwoLevel: Driver<S, Kind, kApplyTwoLevel>::run(job); break;
    default: Driver<S, Kind, kApplyDiv>::run(job); break;
  }
}

template <class S>
void dispatch_rounding(const Job& job) {
  switch (round_kind(job.rounding)) {  // the shared header's rule, as the CUDA kernels dispatch
    case kKindEven: dispatch_scale<S, kKindEven>(job); break;
    case kKindStochastic: dispatch_scale<S, kKindStochastic>(job); break;
    default: dispatch_scale<S, kKindRule>(job); break;
  }
}

}  // namespace

void run_cpu(const Job& job) {
  if (job.numel() == 0) return;
  switch (job.dtype) {
    case kBFloat16: dispatch_rounding<BF16>(job); break;
    case kFloat16: dispatch_rounding<F16>(job); break;
    default: dispatch_rounding<F32>(job); break;
  }
}

}  // namespace groupquant
