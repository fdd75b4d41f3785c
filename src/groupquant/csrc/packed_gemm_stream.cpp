// The register-blocked streaming kernel of the packed GEMM for few input rows, AVX2 path (AVX2 + FMA
// + F16C, compiled with those target options on every x86 build, taken where the host has them:
// packed_gemm_cpu_path.h):
// each weight row is decoded 32 codes at a time straight into four vector registers, multiplied
// by the block's scale (the dequantized weights, bit for bit) and FMA'd into every input row of
// the tile; K runs in chunks whose input rows stay in L1, and threads claim tasks of 64 weight
// rows (packed_gemm_workers.h). Blocks whose size is a multiple of 32; other cases use the decode-to-buffer
// kernel (packed_gemm_cpu.cpp).
//
// Decoders of 32 codes (element values without the scale, as float32):
// - 4-bit, table values exact in bfloat16 (FP4 E2M1, INT4): two byte shuffles of the 16-entry
//   table (high and low byte of each value's bfloat16 bits) and unpacks; the values come out in the
//   order 0, 2, 4, 6, 1, 3, 5, 7 within each run of 8, so the input rows are permuted once per call
//   to match.
// - 8-bit half shift (FP8 E4M3 / E5M2): the code's bits moved into half-precision bits with byte
//   shifts, converted by F16C (elem_mul is folded into the block scale); a block holding a NaN code
//   (nan_low7) is decoded through the table instead.
// - 8-bit int8 (MXINT8): sign extension and conversion.
// - 6-bit (FP6): byte shuffles and shifts into 32-bit lanes, then the 64-entry table by magnitude
//   in registers (sign-symmetric tables) or gathered.
// - anything else: one table lookup per code into a small buffer.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>

#include "packed_gemm.h"
#include "packed_gemm_cpu.h"
#include "packed_gemm_cpu_path.h"
#include "packed_gemm_select.h"
#include "packed_gemm_stream_tiles.h"
#include "packed_gemm_workers.h"

#if defined(GQ_X86_DISPATCH)
#include <immintrin.h>
#define GQP_STREAM 1
// Everything below may use AVX2, FMA and F16C, whatever the build's flags (an AVX-512 build's flags
// stay allowed too: GCC cannot remove a feature the intrinsics headers were compiled with). All
// headers come before: their inline functions and templates keep the build's own options.
#pragma GCC target("avx2,fma,f16c")
#endif

namespace groupquant {
namespace packed {

#if defined(GQP_STREAM)
namespace {

constexpr int64_t kL1Floats = 4096;     // input floats per K chunk (16 KiB, in L1)
constexpr int64_t kPrefetchRows = 4;    // weight rows ahead whose chunk is prefetched

// Values of 32 codes in four vectors.
struct Block {
  __m256 v[4];
};

struct NibbleBf16 {
  __m256i lo, hi;  // low / high byte of the bfloat16 bits of the 16 table values, in both lanes
  explicit NibbleBf16(const float* table) {
    alignas(32) uint8_t lo_bytes[32], hi_bytes[32];
    for (int i = 0; i < 32; ++i) {
      uint32_t bits;
      std::memcpy(&bits, table + (i & 15), 4);
      lo_bytes[i] = static_cast<uint8_t>(bits >> 16);
      hi_bytes[i] = static_cast<uint8_t>(bits >> 24);
    }
    lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo_bytes));
    hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi_bytes));
  }
  // 16 bytes (32 codes, element 2i in the low nibble of byte i) -> values in kNibbleOrder.
  inline void decode(const uint8_t* src, const float*, Block& out) const {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i even = _mm_and_si128(bytes, mask);
    const __m128i odd = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    const __m256i idx = _mm256_inserti128_si256(_mm256_castsi128_si256(even), odd, 1);
    const __m256i blo = _mm256_shuffle_epi8(lo, idx), bhi = _mm256_shuffle_epi8(hi, idx);
    const __m256i w0 = _mm256_unpacklo_epi8(blo, bhi), w1 = _mm256_unpackhi_epi8(blo, bhi);
    const __m256i z = _mm256_setzero_si256();
    out.v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w0));
    out.v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w0));
    out.v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w1));
    out.v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w1));
  }
  float mul = 1.0f;  // values are the table's
};

// Four vectors of 8 values from 16-bit half words w0 (elements 0-7 | 16-23) and w1 (8-15 | 24-31).
inline void halves_to_block(__m256i w0, __m256i w1, Block& out) {
  out.v[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(w0));
  out.v[1] = _mm256_cvtph_ps(_mm256_castsi256_si128(w1));
  out.v[2] = _mm256_cvtph_ps(_mm256_extracti128_si256(w0, 1));
  out.v[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(w1, 1));
}

struct HalfShift {
  int shift;          // half bits = (c & 0x80) << 8 | (c & 0x7F) << shift
  int nan_low7;       // -1: no NaN code
  float inv_mul;      // 1 / elem_mul (a power of two): table values of a NaN block, before elem_mul
  __m128i lo_count, hi_count;
  __m256i lo_mask, hi_mask;
  float mul;          // elem_mul
  explicit HalfShift(const PackedGemmParams& p)
      : shift(p.half_shift), nan_low7(p.nan_low7), inv_mul(1.0f / p.elem_mul), mul(p.elem_mul) {
    lo_count = _mm_cvtsi32_si128(shift);
    hi_count = _mm_cvtsi32_si128(8 - shift);
    lo_mask = _mm256_set1_epi8(static_cast<char>((0xFF << shift) & 0xFF));
    hi_mask = _mm256_set1_epi8(static_cast<char>(0x7F >> (8 - shift)));
  }
  inline void decode(const uint8_t* src, const float* table, Block& out) const {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i low7 = _mm256_and_si256(c, _mm256_set1_epi8(0x7F));
    if (nan_low7 >= 0 &&
        _mm256_movemask_epi8(_mm256_cmpeq_epi8(low7, _mm256_set1_epi8(static_cast<char>(nan_low7)))) != 0) {
      for (int q = 0; q < 4; ++q) {  // a NaN code: this block through the table
        alignas(32) float t[8];
        for (int l = 0; l < 8; ++l) t[l] = table[src[q * 8 + l]] * inv_mul;
        out.v[q] = _mm256_load_ps(t);
      }
      return;
    }
    // per byte: high = sign | low7 >> (8 - shift), low = (low7 << shift) & 0xFF (16-bit shifts, masked)
    const __m256i hb = _mm256_or_si256(_mm256_and_si256(c, _mm256_set1_epi8(static_cast<char>(0x80))),
                                       _mm256_and_si256(_mm256_srl_epi16(low7, hi_count), hi_mask));
    const __m256i lb = _mm256_and_si256(_mm256_sll_epi16(low7, lo_count), lo_mask);
    halves_to_block(_mm256_unpacklo_epi8(lb, hb), _mm256_unpackhi_epi8(lb, hb), out);
  }
};

struct Int8 {
  float mul;  // elem_mul
  inline void decode(const uint8_t* src, const float*, Block& out) const {
    for (int q = 0; q < 4; ++q) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 8 * q));
      out.v[q] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    }
  }
};

// 6-bit codes (FP6 E2M3 / E3M2): eight codes (six bytes) per vector, each code's two bytes
// shuffled into its lane, shifted and masked. A table whose upper half is its lower half with the
// sign flipped (every signed minifloat) is looked up by magnitude in four 8-entry registers
// (permutes and blends) and the sign bit applied; any other table is gathered.
struct Gather6 {
  float mul = 1.0f;
  bool symmetric = false;
  __m256i control, shifts;
  __m256 mag[4];
  const float* table;
  const uint8_t* end;  // one past the last code byte
  Gather6(const float* t, const uint8_t* data_end) : table(t), end(data_end) {
    alignas(32) int8_t c[32];
    alignas(32) int32_t sh[8];
    for (int j = 0; j < 8; ++j) {
      const int byte = (6 * j) >> 3;
      const int lane = j & 3, half = (j >> 2) * 16;
      c[half + 4 * lane] = static_cast<int8_t>(byte);
      c[half + 4 * lane + 1] = static_cast<int8_t>(byte + 1);
      c[half + 4 * lane + 2] = c[half + 4 * lane + 3] = static_cast<int8_t>(0x80);
      sh[j] = (6 * j) & 7;
    }
    control = _mm256_load_si256(reinterpret_cast<const __m256i*>(c));
    shifts = _mm256_load_si256(reinterpret_cast<const __m256i*>(sh));
    symmetric = true;
    for (int i = 0; i < 32; ++i) {
      uint32_t lo, hi;
      std::memcpy(&lo, t + i, 4);
      std::memcpy(&hi, t + i + 32, 4);
      symmetric = symmetric && (hi == (lo ^ 0x80000000u));
    }
    for (int k = 0; k < 4; ++k) mag[k] = _mm256_loadu_ps(t + 8 * k);
  }
  inline __m256 lookup(__m256i idx) const {
    if (!symmetric) return _mm256_i32gather_ps(table, idx, 4);
    const __m256 b3 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28));
    const __m256 low = _mm256_blendv_ps(_mm256_permutevar8x32_ps(mag[0], idx), _mm256_permutevar8x32_ps(mag[1], idx), b3);
    const __m256 high = _mm256_blendv_ps(_mm256_permutevar8x32_ps(mag[2], idx), _mm256_permutevar8x32_ps(mag[3], idx), b3);
    const __m256 v = _mm256_blendv_ps(low, high, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 27)));
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(idx, 26), _mm256_set1_epi32(static_cast<int>(0x80000000u)));
    return _mm256_xor_ps(v, _mm256_castsi256_ps(sign));
  }
  inline void decode(const uint8_t* src, const float*, Block& out) const {
    alignas(32) uint8_t copy[32] = {};
    const uint8_t* run = src;
    if (src + 32 > end) {  // the last runs of the tensor: never read past its end
      std::memcpy(copy, src, 24);
      run = copy;
    }
    for (int q = 0; q < 4; ++q) {
      const __m128i six = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(run + 6 * q));
      const __m256i pairs = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(six), control);
      out.v[q] = lookup(_mm256_and_si256(_mm256_srlv_epi32(pairs, shifts), _mm256_set1_epi32(0x3F)));
    }
  }
};

struct Table {
  int bits;
  float mul = 1.0f;
  inline void decode(const uint8_t* src, const float* table, Block& out) const {
    alignas(32) float t[32];
    for (int j = 0; j < 32; ++j) t[j] = table[code_at(src, j, bits)];
    for (int q = 0; q < 4; ++q) out.v[q] = _mm256_load_ps(t + 8 * q);
  }
};

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Prefetches the K chunk (span bytes) of the weight row kPrefetchRows ahead of row n: rows are rb
// bytes apart, a stride the hardware prefetcher does not follow here.
inline void prefetch_row_ahead(const uint8_t* row, int64_t n, int64_t n1, int64_t rb, int64_t span) {
  if (n + kPrefetchRows >= n1) return;
  const uint8_t* ahead = row + kPrefetchRows * rb;
  for (int64_t o = 0; o < span; o += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T0);
}

// Adds the A accumulators of each of MR input rows into their partial sums (one weight row's slot).
template <int MR, int A>
inline void add_row_sums(__m256 (&acc)[MR][A], float* sums) {
  for (int m = 0; m < MR; ++m) {
    __m256 t = acc[m][0];
    for (int a = 1; a < A; ++a) t = _mm256_add_ps(t, acc[m][a]);
    sums[m] += hsum(t);
  }
}

// part[(n - n0) * MR + m] += the dot products of blocks [b0, b1) for MR input rows m0.. and weight
// rows [n0, n1); x rows are ldx floats apart. Each run of 32 values is multiplied by the block's
// scale times the decoder's elem_mul (exact: both powers of two for MX, so these are the
// dequantized weights bit for bit); where that product overflows, the block goes through the table.
// With one input row the run's dot product is scaled instead (the same up to float32 rounding).
template <int MR, class Dec>
void rows_tile(const PackedGemmJob& job, const Dec& dec, const float* x, int64_t ldx, int64_t m0, int64_t n0,
               int64_t n1, int64_t b0, int64_t b1, float* part_sums) {
  constexpr int A = MR >= 4 ? 1 : (MR == 1 ? 4 : 2);  // accumulators per input row (FMA latency)
  const PackedGemmParams& p = job.p;
  const int64_t sub = p.block_size / 32;  // runs of 32 per block
  const int64_t rb = row_bytes(p), run_bytes = 32 * p.code_bits / 8;
  const Table table{p.code_bits};
  const int64_t span = (b1 - b0) * sub * run_bytes;  // bytes of one row in this K chunk
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = job.data + n * rb + b0 * sub * run_bytes;
    const uint8_t* scales = job.scale + n * p.num_blocks;
    prefetch_row_ahead(row, n, n1, rb, span);
    __m256 acc[MR][A];
    for (int m = 0; m < MR; ++m)
      for (int a = 0; a < A; ++a) acc[m][a] = _mm256_setzero_ps();
    const float* xb = x + m0 * ldx + b0 * p.block_size;
    for (int64_t b = b0; b < b1; ++b) {
      const float s = job.scale_table[scales[b]];
      const float s_eff = s * dec.mul;
      // (never for NibbleBf16, whose mul is 1: its permuted value order stays as the input's)
      const bool via_table = !std::isfinite(s_eff) && std::isfinite(s);
      const __m256 sv = _mm256_set1_ps(via_table ? s : s_eff);
      for (int64_t r = 0; r < sub; ++r, xb += 32, row += run_bytes) {
        Block w;
        if (via_table) {
          table.decode(row, job.value_table, w);
        } else {
          dec.decode(row, job.value_table, w);
        }
        if constexpr (MR == 1) {  // one input row: scale the run's dot product instead of the four weight vectors
          __m256 t = _mm256_mul_ps(w.v[0], _mm256_loadu_ps(xb));
          __m256 u = _mm256_mul_ps(w.v[1], _mm256_loadu_ps(xb + 8));
          t = _mm256_fmadd_ps(w.v[2], _mm256_loadu_ps(xb + 16), t);
          u = _mm256_fmadd_ps(w.v[3], _mm256_loadu_ps(xb + 24), u);
          acc[0][(b + r) & 3] = _mm256_fmadd_ps(_mm256_add_ps(t, u), sv, acc[0][(b + r) & 3]);
          continue;
        }
        for (int q = 0; q < 4; ++q) w.v[q] = _mm256_mul_ps(w.v[q], sv);
        for (int m = 0; m < MR; ++m) {
          const float* xm = xb + m * ldx;
          for (int q = 0; q < 4; ++q) acc[m][q % A] = _mm256_fmadd_ps(w.v[q], _mm256_loadu_ps(xm + 8 * q), acc[m][q % A]);
        }
      }
    }
    add_row_sums<MR, A>(acc, part_sums + (n - n0) * MR);
  }
}

// rows_tile for blocks of 16 (NVFP4): a run of 32 codes holds two blocks, and every decoder puts
// the first block's values in v[0..1] and the second's in v[2..3] (the nibble order permutes only
// within groups of 8), so each half of the run takes its own block's scale. [b0, b1) is an even
// number of blocks. Kept apart from rows_tile so that the blocks-of-32 loop stays as tuned.
template <int MR, class Dec>
void rows_tile_pairs(const PackedGemmJob& job, const Dec& dec, const float* x, int64_t ldx, int64_t m0, int64_t n0,
                     int64_t n1, int64_t b0, int64_t b1, float* part_sums) {
  constexpr int A = MR >= 4 ? 1 : (MR == 1 ? 4 : 2);  // accumulators per input row (FMA latency)
  const PackedGemmParams& p = job.p;
  const int64_t rb = row_bytes(p), run_bytes = 32 * p.code_bits / 8;
  const Table table{p.code_bits};
  const int64_t span = (b1 - b0) / 2 * run_bytes;  // bytes of one row in this K chunk
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = job.data + n * rb + b0 / 2 * run_bytes;
    const uint8_t* scales = job.scale + n * p.num_blocks;
    prefetch_row_ahead(row, n, n1, rb, span);
    __m256 acc[MR][A];
    for (int m = 0; m < MR; ++m)
      for (int a = 0; a < A; ++a) acc[m][a] = _mm256_setzero_ps();
    const float* xb = x + m0 * ldx + b0 * 16;
    for (int64_t b = b0; b < b1; b += 2, xb += 32, row += run_bytes) {
      const float sa = job.scale_table[scales[b]], sb = job.scale_table[scales[b + 1]];
      const float ea = sa * dec.mul, eb = sb * dec.mul;
      const bool via_table = (!std::isfinite(ea) && std::isfinite(sa)) || (!std::isfinite(eb) && std::isfinite(sb));
      const __m256 sva = _mm256_set1_ps(via_table ? sa : ea), svb = _mm256_set1_ps(via_table ? sb : eb);
      Block w;
      if (via_table) {
        table.decode(row, job.value_table, w);
      } else {
        dec.decode(row, job.value_table, w);
      }
      if constexpr (MR == 1) {  // one input row: scale each block's dot product
        const __m256 ta = _mm256_fmadd_ps(w.v[1], _mm256_loadu_ps(xb + 8), _mm256_mul_ps(w.v[0], _mm256_loadu_ps(xb)));
        const __m256 tb = _mm256_fmadd_ps(w.v[3], _mm256_loadu_ps(xb + 24), _mm256_mul_ps(w.v[2], _mm256_loadu_ps(xb + 16)));
        acc[0][b & 3] = _mm256_fmadd_ps(ta, sva, acc[0][b & 3]);
        acc[0][(b + 1) & 3] = _mm256_fmadd_ps(tb, svb, acc[0][(b + 1) & 3]);
        continue;
      }
      w.v[0] = _mm256_mul_ps(w.v[0], sva);
      w.v[1] = _mm256_mul_ps(w.v[1], sva);
      w.v[2] = _mm256_mul_ps(w.v[2], svb);
      w.v[3] = _mm256_mul_ps(w.v[3], svb);
      for (int m = 0; m < MR; ++m) {
        const float* xm = xb + m * ldx;
        for (int q = 0; q < 4; ++q) acc[m][q % A] = _mm256_fmadd_ps(w.v[q], _mm256_loadu_ps(xm + 8 * q), acc[m][q % A]);
      }
    }
    add_row_sums<MR, A>(acc, part_sums + (n - n0) * MR);
  }
}

// Rows m0 .. m0 + MR of the output for weight rows [n0, n1), K in chunks of blocks whose input rows
// fit L1 (stream_chunks). Pairs: blocks of 16 (rows_tile_pairs), else blocks of a multiple of 32 (rows_tile).
template <int MR, bool Pairs, class Dec>
void rows_all_chunks(const PackedGemmJob& job, const Dec& dec, int64_t m0, int64_t n0, int64_t n1, float* part) {
  const PackedGemmParams& p = job.p;
  const int64_t ldx = p.num_blocks * p.block_size;
  const int64_t fit = std::max<int64_t>(1, kL1Floats / MR / p.block_size);  // blocks per chunk
  const int64_t chunk = Pairs ? std::max<int64_t>(2, fit & ~int64_t{1}) : fit;  // pairs: whole runs
  stream_chunks<MR>(job, m0, n0, n1, p.num_blocks, chunk, part, [&](int64_t b0, int64_t b1) {
    if constexpr (Pairs) {
      rows_tile_pairs<MR>(job, dec, job.x, ldx, m0, n0, n1, b0, b1, part);
    } else {
      rows_tile<MR>(job, dec, job.x, ldx, m0, n0, n1, b0, b1, part);
    }
  });
}

template <bool Pairs, class Dec>
void run_with(const PackedGemmJob& job, const Dec& dec) {
  stream_row_tasks(job, [&](auto rows, int64_t m0, int64_t n0, int64_t n1, float* part) {
    rows_all_chunks<decltype(rows)::value, Pairs>(job, dec, m0, n0, n1, part);
  });
}

}  // namespace

bool nibble_order_input(const PackedGemmParams& p) {
  return stream_avx2_applies(p, nullptr) && p.code_bits == 4 && p.decode_path == kDecodeNibbleBf16;
}

// run_with for the weight's block size: pairs of blocks of 16, or blocks of a multiple of 32.
template <class Dec>
void run_blocks(const PackedGemmJob& job, const Dec& dec) {
  if (job.p.block_size == 16) run_with<true>(job, dec);
  else run_with<false>(job, dec);
}

bool run_packed_stream_avx2(const PackedGemmJob& job) {
  const PackedGemmParams& p = job.p;
  if (!stream_avx2_applies(p, job.value_table)) return false;
  // the global scale (NVFP4's second scale) multiplies the row's sum (stream_chunks)
  if (p.code_bits == 4 && p.decode_path == kDecodeNibbleBf16) {
    run_blocks(job, NibbleBf16(job.value_table));
  } else if (p.code_bits == 8 && p.decode_path == kDecodeHalf && (p.half_shift >= 1 && p.half_shift <= 8)) {
    run_blocks(job, HalfShift(p));
  } else if (p.code_bits == 8 && p.decode_path == kDecodeInt8) {
    run_blocks(job, Int8{p.elem_mul});
  } else if (p.code_bits == 6) {
    run_blocks(job, Gather6(job.value_table, job.data + p.out_features * row_bytes(p)));
  } else {
    run_blocks(job, Table{p.code_bits});
  }
  return true;
}

#else

bool nibble_order_input(const PackedGemmParams&) { return false; }
bool run_packed_stream_avx2(const PackedGemmJob&) { return false; }

#endif

}  // namespace packed
}  // namespace groupquant
