// The weight-row pairs of the AVX-512 streaming kernels for 8-bit codes
// (packed_gemm_stream_avx512_8bit.cpp, which describes the method): with 2 to 8 float32 or 4 to 8
// bfloat16 input rows, two weight rows are decoded per run and each input vector loaded once for
// both, with one accumulator per input and weight row (the single-row loop kept two per input row,
// which with 8 rows left no registers).
//
// AVX-512 code: include it after packed_gemm_stream_avx512_8bit_decode.h (its Tile, Decoder and
// scale helpers), which comes after the file's `#pragma GCC target`. Internal linkage.
#pragma once

namespace groupquant {
namespace packed {
namespace {

// Two weight rows' part of a K chunk: their codes and block scales, and the decode of a run of both.
struct RowPair {
  alignas(64) float sbuf[2][kMaxChunkRuns * 4 + 16];  // scales of blocks [b0, b1) (+ slack for the loads)
  const uint8_t* row[2];                               // the rows' codes from run r0

  RowPair(const Tile& t, int64_t n, int64_t r0, int64_t b0, int64_t b1) {
    for (int j = 0; j < 2; ++j) {
      row[j] = t.job->data + (n + j) * t.rb + r0 * 64;
      row_scales(t, n + j, b0, b1, sbuf[j]);
    }
  }

  // Run r0 + i of both rows (its first block at sbuf[.][first]): w[j] the two word vectors of row
  // j (Decoder), s[j] its lanes' block scales.
  template <int Kind>
  GQ_K8_INLINE inline void run(const Tile& t, const Decoder<Kind>& dec, int64_t i, int32_t first, __m512i (*w)[2],
                               __m512* s) const {
    for (int j = 0; j < 2; ++j) {
      dec(_mm512_loadu_si512(row[j] + i * 64), &w[j][0], &w[j][1]);
      s[j] = run_scales(t, sbuf[j], first);
    }
  }
};

// part[(n + j - n0) * MR + m] += dot products of runs [r0, r1) for float32 input rows m0 .. m0 + MR
// (2 to 8) and weight rows n, n + 1: both rows' runs decoded and dequantized, each half run's input
// vectors loaded once for both rows, one accumulator per input and weight row (as the 4-bit
// kernel's pair_tile; docs/packed-inference.md, "Tuning figures", avx512_8bit).
template <int MR, int Kind>
void pair_tile_f32(const Tile& t, int64_t m0, int64_t n, int64_t n0, int64_t r0, int64_t r1, int64_t b0, int64_t b1,
                   const int32_t* first, float* part) {
  const RowPair pair(t, n, r0, b0, b1);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const Decoder<Kind> dec(t);
  __m512 acc[MR][2];
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
  const float* xr = static_cast<const float*>(t.x) + m0 * t.kp + r0 * 64;
  for (int64_t r = r0; r < r1; ++r) {
    __m512i w[2][2];
    __m512 s[2];
    pair.run(t, dec, r - r0, first[r - r0], w, s);
    const float* xq = xr + (r - r0) * 64;
    for (int h = 0; h < 2; ++h) {  // half h: the words of w[.][h], widened to float32 lanes q = 2h, 2h + 1
      __m512 v[2][2];
      for (int j = 0; j < 2; ++j) {
        v[j][0] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w[j][h], 16)), s[j]);
        v[j][1] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(w[j][h], high)), s[j]);
      }
      for (int m = 0; m < MR; ++m) {
        const float* xm = xq + m * t.kp + 32 * h;
        const __m512 x0 = _mm512_loadu_ps(xm), x1 = _mm512_loadu_ps(xm + 16);
        for (int j = 0; j < 2; ++j) acc[m][j] = _mm512_fmadd_ps(v[j][1], x1, _mm512_fmadd_ps(v[j][0], x0, acc[m][j]));
      }
    }
  }
  for (int j = 0; j < 2; ++j)
    for (int m = 0; m < MR; ++m) part[(n + j - n0) * MR + m] += _mm512_reduce_add_ps(acc[m][j]);
}

// The pairs of pair_tile_f32 for scaled bfloat16 input rows (4 to 8): each run's two dot products
// per input and weight row (vdpbf16ps), unscaled (kUnit: every row's 2^-e_m is 1, none) and FMA'd
// with the weight row's block scales into one accumulator per input and weight row; 2 input rows
// were slower so (two rows read at once, no prefetch; docs/packed-inference.md, "Tuning figures", avx512_8bit_bf16).
template <int MR, int Kind, bool kUnit>
void pair_tile_bf16(const Tile& t, int64_t m0, int64_t n, int64_t n0, int64_t r0, int64_t r1, int64_t b0, int64_t b1,
                    const int32_t* first, float* part) {
  const RowPair pair(t, n, r0, b0, b1);
  const __m512 zero = _mm512_setzero_ps();
  const Decoder<Kind> dec(t);
  __m512 acc[MR][2];
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = zero;
  const uint16_t* xr = static_cast<const uint16_t*>(t.x) + m0 * t.kp + r0 * 64;
  for (int64_t r = r0; r < r1; ++r) {
    __m512i w[2][2];
    __m512 s[2];
    pair.run(t, dec, r - r0, first[r - r0], w, s);
    const uint16_t* xq = xr + (r - r0) * 64;
    for (int m = 0; m < MR; ++m) {
      const uint16_t* xm = xq + m * t.kp;
      const __m512bh x0 = as_bh(_mm512_loadu_si512(xm)), x1 = as_bh(_mm512_loadu_si512(xm + 32));
      for (int j = 0; j < 2; ++j) {
        const __m512 d = _mm512_dpbf16_ps(_mm512_dpbf16_ps(zero, as_bh(w[j][0]), x0), as_bh(w[j][1]), x1);
        acc[m][j] = _mm512_fmadd_ps(kUnit ? d : _mm512_mul_ps(d, _mm512_set1_ps(t.unscale[m0 + m])), s[j], acc[m][j]);
      }
    }
  }
  for (int j = 0; j < 2; ++j)
    for (int m = 0; m < MR; ++m) part[(n + j - n0) * MR + m] += _mm512_reduce_add_ps(acc[m][j]);
}

}  // namespace
}  // namespace packed
}  // namespace groupquant
