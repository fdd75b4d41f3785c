// The streaming kernels of the packed GEMM for few input rows and 8-bit codes (MXFP8 E4M3 / E5M2,
// MXINT8: any 256-entry table whose values are exact in bfloat16), AVX-512 path (F/BW/VL/DQ plus
// VBMI for the byte permutes; the bfloat16-input kernel also BF16). Compiled with those target
// options on every x86 build, taken where the host has them (packed_gemm_cpu_path.h and the VBMI
// check here); the caller takes the AVX2 kernel otherwise.
//
// Decode: a run of 64 codes is one 512-bit load. Each value's bfloat16 bits are looked up as two
// bytes: vpermi2b (_mm512_permutex2var_epi8) reads the low 7 bits of each code as an index into a
// 128-entry byte table held in two registers, once for the high and once for the low byte.
// - Sign-magnitude tables (table[c | 0x80] is table[c] with the sign flipped: every FP8 format):
//   two permutes, and the code's bit 7 XOR'd into the high byte (one ternary-logic op).
// - Two's complement tables (MXINT8: int8(c) * 2^-6): the same by |int8(c)| - 1, zero codes masked.
// - Any other table: the two halves of the table are permuted separately and blended by bit 7.
// Unpacking the low and high bytes (vpunpck{l,h}bw, within 128-bit lanes) gives two vectors of 32
// bfloat16 values: word 8 L + t of the first is code 16 L + t, of the second code 16 L + 8 + t.
// - bfloat16 input: vdpbf16ps adds words 2 j, 2 j + 1 of lane L into float32 lane 4 L + j, so each
//   float32 lane covers codes inside [16 L, 16 L + 16) of the run: one block's, for blocks of 16,
//   32, 64 or multiples of 64 (per-lane block scales). Input rows are permuted to match (position
//   32 q + 8 L + t <- element 16 L + 8 q + t).
// - float32 input: the words widened to float32 (exact): the even word of each dword shifted up by
//   16, the odd word masked in place; four vectors, so float32 lane 4 L + j holds codes 16 L +
//   {2 j, 2 j + 1, 8 + 2 j, 9 + 2 j}; input permuted to match (position 16 q + 4 L + j <- element
//   16 L + 8 (q / 2) + 2 j + q % 2).
//
// Values and sums, per output element (row n, input row m), as the 4-bit AVX-512 kernels do:
// - float32, one input row: each run's products value * x (float32) summed lane-wise, the lane sums
//   multiplied by their block scales and added into accumulators; 2 to 8 rows: values times their
//   block scale (value * scale in float32: the dequantized weight, bit for bit), FMA'd with x;
//   weight rows in pairs (2 to 8 float32 rows, 4 to 8 bfloat16 rows), each input vector loaded
//   once for both.
// - bfloat16: each input row is scaled by a power of two 2^e_m by the rule of
//   packed_gemm_stream_bf16_rows.h (e_m = 0 for rows within [2^-100, 2^64); else its largest
//   finite magnitude brought into [1, 2)); the call is taken only where every row's nonzero finite
//   magnitudes are then at least 2^-100 and below 2^64 (else the float32 kernel runs) and the
//   table's finite values are multiples of 2^-16 no larger than 2^16 in magnitude. Then the
//   scaled inputs are multiples of 2^-107 (bfloat16: 8 significant bits) and every product is
//   exact (8 x 8 significant bits), a multiple of 2^-123 and below 2^80; a lane sums 4 products
//   per run: nothing is subnormal (which vdpbf16ps would flush), nothing overflows. The lane sums
//   are multiplied by 2^-e_m (exact) and FMA'd with the lane's block scale into float32.
// NaN codes (E4M3 0x7F / 0xFF, E5M2 0x7D-0x7F, 0xFD-0xFF) decode to a bfloat16 NaN and Inf codes to
// Inf, so a block holding one gives NaN / Inf in the sums as the reference decode's products do.
// Outputs differ from the other paths' only in the float32 summation order and rounding.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "packed_gemm.h"
#include "packed_gemm_cpu.h"
#include "packed_gemm_cpu_path.h"
#include "packed_gemm_stream_bf16_rows.h"
#include "packed_gemm_stream_tiles.h"
#include "packed_gemm_workers.h"

#if defined(GQ_X86_DISPATCH)
#include <immintrin.h>
#endif

namespace groupquant {
namespace packed {
namespace {

// The bfloat16 bits of v (NaN: a quiet NaN) in *bits; false where v is not exact in bfloat16.
bool bf16_bits(float v, uint16_t* bits) {
  if (std::isnan(v)) {
    *bits = 0x7FC0u;
    return true;
  }
  uint32_t b;
  std::memcpy(&b, &v, 4);
  *bits = static_cast<uint16_t>(b >> 16);
  return (b & 0xFFFFu) == 0;
}

// Whether the 8-bit kernels' layout takes the weight: padded K a multiple of 64, blocks of 16, 32,
// 64 or a multiple of 64 (a float32 lane's codes lie in one block).
bool layout_fits(const PackedGemmParams& p) {
  const int64_t b = p.block_size;
  return p.code_bits == 8 && (p.num_blocks * b) % 64 == 0 && b >= 16 && (64 % b == 0 || b % 64 == 0);
}

// Whether the host has AVX-512 VBMI (vpermi2b); the path check covers F/BW/VL/DQ and BF16.
bool host_has_vbmi() {
#if defined(GQ_X86_DISPATCH)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

}  // namespace

bool stream512_8bit_applies(const PackedGemmParams& p, const float* value_table) {
  if (!layout_fits(p) || !host_has_vbmi()) return false;
  uint16_t bits;
  for (int c = 0; c < 256; ++c) {
    if (!bf16_bits(value_table[c], &bits)) return false;
  }
  return true;
}

bool stream512_8bit_bf16_applies(const PackedGemmParams& p, const float* value_table) {
  if (!stream512_8bit_applies(p, value_table)) return false;
  for (int c = 0; c < 256; ++c) {
    const float v = value_table[c];
    if (!std::isfinite(v)) continue;  // NaN / Inf propagate through the products
    const float scaled = v * 65536.0f;  // exact for |v| <= 2^16
    if (std::fabs(v) > 65536.0f || std::floor(scaled) != scaled) return false;
  }
  return true;
}

}  // namespace packed
}  // namespace groupquant

#if defined(GQ_X86_DISPATCH)
// Everything below may use these instructions (the checks above are plain C++, safe on any host).
// All headers come before: their inline functions and templates keep the build's own options.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")
#include "packed_gemm_stream_avx512_8bit_decode.h"  // AVX-512 code: after the pragma
#include "packed_gemm_stream_avx512_8bit_pairs.h"
#endif

namespace groupquant {
namespace packed {

#if defined(GQ_X86_DISPATCH)
namespace {

constexpr int64_t kL1Bytes = 65536;       // input bytes per K chunk (L2; 16 KiB chunks measured slower at batch 8)
constexpr int kGemvRows = 4;              // one float32 input row, whole rows: weight rows decoded together
constexpr int64_t kAheadGroups = 2;       // and the groups ahead whose bytes are prefetched

// ---- float32 input ------------------------------------------------------------------------------

// The two vectors of 32 bfloat16 values widened to four of 16 float32 (exact): the even word of
// each dword shifted up by 16, the odd word masked in place (high: 0xFFFF0000 in every dword).
GQ_K8_INLINE inline void widen_words(__m512i w0, __m512i w1, __m512i high, __m512* v) {
  v[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16));
  v[1] = _mm512_castsi512_ps(_mm512_and_si512(w0, high));
  v[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16));
  v[3] = _mm512_castsi512_ps(_mm512_and_si512(w1, high));
}

// One run's lane sums for one float32 input row: v[q] . x[q] over q, in one chain.
GQ_K8_INLINE inline __m512 dot_run(const __m512* v, const __m512* x) {
  __m512 d = _mm512_mul_ps(v[0], x[0]);
  d = _mm512_fmadd_ps(v[1], x[1], d);
  d = _mm512_fmadd_ps(v[2], x[2], d);
  return _mm512_fmadd_ps(v[3], x[3], d);
}

// part[(n - n0) * MR + m] += dot products of runs [r0, r1) for input rows m0 .. m0 + MR, weight
// rows [n0, n1); float32 input (2 to 8 input rows: weight rows in pairs, pair_tile_f32, the last
// one of an odd count alone).
template <int MR, int Kind>
void rows_tile_f32(const Tile& t, int64_t m0, int64_t n0, int64_t n1, int64_t r0, int64_t r1, float* part) {
  const PackedGemmParams& p = t.job->p;
  const int64_t b0 = r0 * 64 / p.block_size;
  const int64_t b1 = std::min(p.num_blocks, (r1 * 64 + p.block_size - 1) / p.block_size);
  alignas(64) float sbuf[kMaxChunkRuns * 4 + 16];  // scales of blocks [b0, b1) (+ slack for the loads)
  int32_t first[kMaxChunkRuns];  // run r0 + i starts at block b0 + first[i]
  run_first_blocks(p.block_size, r0, r1, b0, first);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));  // the odd word of each dword
  const Decoder<Kind> dec(t);
  struct Acc {
    __m512 v[MR];
  };
  int64_t n_first = n0;
  if constexpr (MR >= 2) {
    for (; n_first + 2 <= n1; n_first += 2) pair_tile_f32<MR, Kind>(t, m0, n_first, n0, r0, r1, b0, b1, first, part);
  }
  for (int64_t n = n_first; n < n1; ++n) {
    const uint8_t* row = t.job->data + n * t.rb + r0 * 64;
    row_scales(t, n, b0, b1, sbuf);
    const float* xr = static_cast<const float*>(t.x) + m0 * t.kp + r0 * 64;
    float* out = part + (n - n0) * MR;
    Acc a, b;
    for (int m = 0; m < MR; ++m) a.v[m] = b.v[m] = _mm512_setzero_ps();
    alternate_runs(r0, r1, a, b, [&](int64_t r, Acc& acc) GQ_K8_INLINE {
      __m512i w0, w1;
      dec(_mm512_loadu_si512(row + (r - r0) * 64), &w0, &w1);
      __m512 v[4];
      widen_words(w0, w1, high, v);
      const __m512 s = run_scales(t, sbuf, first[r - r0]);
      const float* xq = xr + (r - r0) * 64;
      if constexpr (MR == 1) {  // one input row: scale the lane sums
        __m512 x[4];
        for (int q = 0; q < 4; ++q) x[q] = _mm512_loadu_ps(xq + 16 * q);
        acc.v[0] = _mm512_fmadd_ps(dot_run(v, x), s, acc.v[0]);
      } else {
        for (int q = 0; q < 4; ++q) v[q] = _mm512_mul_ps(v[q], s);  // the dequantized weights
        for (int m = 0; m < MR; ++m) {
          const float* xm = xq + m * t.kp;
          __m512 d = _mm512_mul_ps(v[0], _mm512_loadu_ps(xm));
          d = _mm512_fmadd_ps(v[1], _mm512_loadu_ps(xm + 16), d);
          d = _mm512_fmadd_ps(v[2], _mm512_loadu_ps(xm + 32), d);
          acc.v[m] = _mm512_add_ps(acc.v[m], _mm512_fmadd_ps(v[3], _mm512_loadu_ps(xm + 48), d));
        }
      }
    });
    for (int m = 0; m < MR; ++m) out[m] += _mm512_reduce_add_ps(_mm512_add_ps(a.v[m], b.v[m]));
  }
}

// ---- bfloat16 input -----------------------------------------------------------------------------

// The same as rows_tile_f32 for scaled bfloat16 input rows (vdpbf16ps), lane sums unscaled then
// times the block scale; kUnit: every row's 2^-e_m is 1 (no unscaling). 4 to 8 input rows: weight
// rows in pairs (pair_tile_bf16), the last one of an odd count alone.
template <int MR, int Kind, bool kUnit>
void rows_tile_bf16(const Tile& t, int64_t m0, int64_t n0, int64_t n1, int64_t r0, int64_t r1, float* part) {
  const PackedGemmParams& p = t.job->p;
  const int64_t b0 = r0 * 64 / p.block_size;
  const int64_t b1 = std::min(p.num_blocks, (r1 * 64 + p.block_size - 1) / p.block_size);
  alignas(64) float sbuf[kMaxChunkRuns * 4 + 16];
  int32_t first[kMaxChunkRuns];  // run r0 + i starts at block b0 + first[i]
  run_first_blocks(p.block_size, r0, r1, b0, first);
  __m512 u[MR];
  for (int m = 0; m < MR; ++m) u[m] = _mm512_set1_ps(t.unscale[m0 + m]);
  const __m512 zero = _mm512_setzero_ps();
  const Decoder<Kind> dec(t);
  struct Acc {
    __m512 v[MR];
  };
  int64_t n_first = n0;
  if constexpr (MR >= 4) {
    for (; n_first + 2 <= n1; n_first += 2) pair_tile_bf16<MR, Kind, kUnit>(t, m0, n_first, n0, r0, r1, b0, b1, first, part);
  }
  for (int64_t n = n_first; n < n1; ++n) {
    const uint8_t* row = t.job->data + n * t.rb + r0 * 64;
    row_scales(t, n, b0, b1, sbuf);
    const uint16_t* xr = static_cast<const uint16_t*>(t.x) + m0 * t.kp + r0 * 64;
    float* out = part + (n - n0) * MR;
    Acc a, b;
    for (int m = 0; m < MR; ++m) a.v[m] = b.v[m] = zero;
    alternate_runs(r0, r1, a, b, [&](int64_t r, Acc& acc) GQ_K8_INLINE {
      __m512i w0, w1;
      dec(_mm512_loadu_si512(row + (r - r0) * 64), &w0, &w1);
      const __m512 s = run_scales(t, sbuf, first[r - r0]);
      const uint16_t* xq = xr + (r - r0) * 64;
      for (int m = 0; m < MR; ++m) {
        const uint16_t* xm = xq + m * t.kp;
        __m512 d = _mm512_dpbf16_ps(zero, as_bh(w0), as_bh(_mm512_loadu_si512(xm)));
        d = _mm512_dpbf16_ps(d, as_bh(w1), as_bh(_mm512_loadu_si512(xm + 32)));
        acc.v[m] = _mm512_fmadd_ps(kUnit ? d : _mm512_mul_ps(d, u[m]), s, acc.v[m]);
      }
    });
    for (int m = 0; m < MR; ++m) out[m] += _mm512_reduce_add_ps(_mm512_add_ps(a.v[m], b.v[m]));
  }
}

// ---- one float32 input row over whole rows ------------------------------------------------------

// part[n + j - n0] += dot products of float32 input row m0 with weight rows n + j, j < NR, over
// whole rows: each run's 4 input vectors are loaded once for the NR rows (4 at a time, kGemvRows).
// 4 rows read at once defeat the hardware prefetcher, so the group kAheadGroups ahead is prefetched
// into L2 in memory order, one line per run and row, its scale bytes at the start (past the end of
// the data too: a prefetch does not fault); as in the 4-bit kernels. (For bfloat16 input, whose
// runs need 2 input loads, not 4, this was no faster: it keeps rows_tile_bf16.)
template <int NR, int Kind>
void gemv_group_f32(const Tile& t, int64_t m0, int64_t n, int64_t n0, const int32_t* first, float* part) {
  const PackedGemmJob& job = *t.job;
  alignas(64) float sbuf[NR][kMaxChunkRuns * 4 + 16];  // scales of the rows' blocks (+ slack for the loads)
  const uint8_t* row = job.data + n * t.rb;             // rows n .. n + NR - 1 follow at rb bytes
  const int64_t ahead = kAheadGroups * kGemvRows * t.rb;
  const uint8_t* scale_ahead = job.scale + (n + kAheadGroups * kGemvRows) * job.p.num_blocks;
  for (int64_t o = 0; o < NR * job.p.num_blocks; o += 64) _mm_prefetch(reinterpret_cast<const char*>(scale_ahead + o), _MM_HINT_T1);
  for (int j = 0; j < NR; ++j) row_scales(t, n + j, 0, job.p.num_blocks, sbuf[j]);
  const Decoder<Kind> dec(t);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));  // the odd word of each dword
  __m512 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm512_setzero_ps();
  const float* xr = static_cast<const float*>(t.x) + m0 * t.kp;
  for (int64_t r = 0; r < t.runs; ++r) {
    const int64_t o = r * 64;
    __m512 x[4];
    for (int q = 0; q < 4; ++q) x[q] = _mm512_loadu_ps(xr + o + 16 * q);
    for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(row + ahead + o * NR + j * 64), _MM_HINT_T1);
      __m512i w0, w1;
      dec(_mm512_loadu_si512(row + j * t.rb + o), &w0, &w1);
      __m512 v[4];
      widen_words(w0, w1, high, v);
      acc[j] = _mm512_fmadd_ps(dot_run(v, x), run_scales(t, sbuf[j], first[r]), acc[j]);
    }
  }
  for (int j = 0; j < NR; ++j) part[n + j - n0] += _mm512_reduce_add_ps(acc[j]);
}

// Float32 input row m0 alone, whole rows in one chunk: the weight rows [n0, n1) in groups of
// kGemvRows (docs/packed-inference.md, "Tuning figures", avx512_8bit).
template <int Kind>
void gemv_rows_f32(const Tile& t, int64_t m0, int64_t n0, int64_t n1, float* part) {
  int32_t first[kMaxChunkRuns];  // run r starts at block first[r]
  run_first_blocks(t.job->p.block_size, 0, t.runs, 0, first);
  int64_t n = n0;
  for (; n + kGemvRows <= n1; n += kGemvRows) gemv_group_f32<kGemvRows, Kind>(t, m0, n, n0, first, part);
  for (; n < n1; ++n) gemv_group_f32<1, Kind>(t, m0, n, n0, first, part);
}

// ---- driver -------------------------------------------------------------------------------------

// Rows m0 .. m0 + MR of the output for weight rows [n0, n1), K in chunks whose input rows fit L1.
// (stream_chunks; one input row of float32 with K in one chunk: gemv_rows_f32, all runs at once).
template <int MR, bool Bf16, int Kind>
void rows_all_chunks(const Tile& t, int64_t m0, int64_t n0, int64_t n1, float* part) {
  const int64_t run_input_bytes = 64 * (Bf16 ? 2 : 4);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(kMaxChunkRuns, kL1Bytes / MR / run_input_bytes));
  stream_chunks<MR>(*t.job, m0, n0, n1, t.runs, chunk, part, [&](int64_t r0, int64_t r1) {
    if constexpr (Bf16) {
      if (std::all_of(t.unscale + m0, t.unscale + m0 + MR, [](float u) { return u == 1.0f; })) {
        rows_tile_bf16<MR, Kind, true>(t, m0, n0, n1, r0, r1, part);
      } else {
        rows_tile_bf16<MR, Kind, false>(t, m0, n0, n1, r0, r1, part);
      }
    } else if (MR == 1 && chunk >= t.runs) {
      gemv_rows_f32<Kind>(t, m0, n0, n1, part);  // the one chunk [0, runs)
    } else {
      rows_tile_f32<MR, Kind>(t, m0, n0, n1, r0, r1, part);
    }
  });
}

template <bool Bf16, int Kind>
void run_tiles(const Tile& t) {
  stream_row_tasks(*t.job, [&](auto tile_rows, int64_t m0, int64_t n0, int64_t n1, float* part) {
    rows_all_chunks<decltype(tile_rows)::value, Bf16, Kind>(t, m0, n0, n1, part);
  });
}

// The parts of a Tile every call fills: tables, lane map, sizes.
void init_tile(const PackedGemmJob& job, Tile* t) {
  const PackedGemmParams& p = job.p;
  t->job = &job;
  t->kp = p.num_blocks * p.block_size;
  t->rb = row_bytes(p);
  t->runs = t->kp / 64;
  load_tables(job.value_table, t);
  alignas(64) int32_t lanes[16];
  for (int i = 0; i < 16; ++i) lanes[i] = static_cast<int32_t>(16 * (i / 4) / p.block_size);
  t->lane_block = _mm512_load_si512(lanes);
  t->lane_blocks = p.block_size >= 64 ? 1 : static_cast<int>(64 / p.block_size);
  t->e8m0 = is_e8m0_table(job.scale_table);
}

// float32 input rows in run order: within each run of 64, position 16 q + 4 L + j <- element
// 16 L + 8 (q / 2) + 2 j + q % 2 (q: the even, then odd words of w0, then of w1).
void permute_f32(const float* x, int64_t rows, int64_t kp, float* dst) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* src = x + m * kp;
    float* out = dst + m * kp;
    for (int64_t r = 0; r < kp; r += 64)
      for (int q = 0; q < 4; ++q)
        for (int l = 0; l < 4; ++l)
          for (int j = 0; j < 4; ++j) out[r + 16 * q + 4 * l + j] = src[r + 16 * l + 8 * (q / 2) + 2 * j + q % 2];
  }
}

// bfloat16 input rows scaled by 2^e_m (packed_gemm_stream_bf16_rows.h), in run order (position
// 32 q + 8 L + t <- element 16 L + 8 q + t); false where a row's range does not fit the rule.
bool prepare_bf16(const float* x, int64_t rows, int64_t kp, uint16_t* dst, float* unscale) {
  return prepare_bf16_rows<64>(x, rows, kp, dst, unscale, kp, [](int p) {
    const int q = p / 32, l = (p % 32) / 8, i = p % 8;
    return 16 * l + 8 * q + i;
  });
}

}  // namespace

bool run_packed_stream_avx512_8bit(const PackedGemmJob& job, float* scratch) {
  if (!stream512_8bit_applies(job.p, job.value_table)) return false;
  Tile t{};
  init_tile(job, &t);
  permute_f32(job.x, job.rows, t.kp, scratch);
  t.x = scratch;
  switch (t.kind) {
    case kSignMagnitude: run_tiles<false, kSignMagnitude>(t); break;
    case kTwosComplement: run_tiles<false, kTwosComplement>(t); break;
    default: run_tiles<false, kAnyTable>(t); break;
  }
  return true;
}

bool run_packed_stream_avx512_8bit_bf16(const PackedGemmJob& job, void* scratch, float* unscale) {
  if (!stream512_8bit_bf16_applies(job.p, job.value_table)) return false;
  Tile t{};
  init_tile(job, &t);
  uint16_t* xs = static_cast<uint16_t*>(scratch);
  if (!prepare_bf16(job.x, job.rows, t.kp, xs, unscale)) return false;
  t.x = xs;
  t.unscale = unscale;
  switch (t.kind) {
    case kSignMagnitude: run_tiles<true, kSignMagnitude>(t); break;
    case kTwosComplement: run_tiles<true, kTwosComplement>(t); break;
    default: run_tiles<true, kAnyTable>(t); break;
  }
  return true;
}

#else

bool run_packed_stream_avx512_8bit(const PackedGemmJob&, float*) { return false; }
bool run_packed_stream_avx512_8bit_bf16(const PackedGemmJob&, void*, float*) { return false; }

#endif

}  // namespace packed
}  // namespace groupquant
