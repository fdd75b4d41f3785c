// The streaming kernel of the packed GEMM for few input rows, AVX-512 path (F, BW, VL, DQ; compiled
// with those target options on every x86 build, taken where the host has them:
// packed_gemm_cpu_path.h), for 4-bit codes (MXFP4, NVFP4, INT4: any 16-entry table).
//
// Decode: a run of 128 codes is 64 bytes, one 512-bit load: 16 dwords of 8 codes each (code
// 8j + t in bits 4t .. 4t + 3 of dword j). Two ways, giving the same 8 vectors (vector t holds
// code 8j + t's value in lane j):
// - words (where every table value is exact in bfloat16, as FP4 E2M1's and INT4's are): a word
//   permute (vpermw) of the values' bfloat16 bits, held twice in a 32-entry table so that bit 4 of
//   each index does not matter, by the raw words, and by the words shifted by 4, 8, 12, gives the
//   bfloat16 bits of codes 8j + q (low word of dword j) and 8j + 4 + q (high word), q = 0 .. 3;
//   a dword shift left by 16 and a mask of the high word make them float32 (bfloat16 bits are
//   float32's top half: the table's float32 values, bit for bit). 3 shifts and 4 permutes, plus 4
//   shifts and 4 masks (which any vector ALU runs), against 7 + 8 for the other way: on AMD
//   Zen 4 the run's cost is that of its shuffle / shift / FMA operations.
// - dwords (any table): a permute of the 16-entry float32 table by the dwords (vpermps reads the
//   low 4 bits of each index) gives code 8j of every dword j; shifting the dwords by 4, 8, ...,
//   28 gives codes 8j + 1, ..., 8j + 7: 7 shifts and 8 permutes.
// The input rows are permuted once per call to match (within every run of 128: position 16 t + j
// holds element 8 j + t). Lane j covers elements 8j .. 8j + 7, so blocks of 8, 16, 32, 64 or
// multiples of 128 give each lane one block's scale: a per-lane scale vector per run.
//
// Values and sums, per output element (row n, input row m):
// - one input row: each run's 128 products value * x are summed in float32 lane-wise (8 terms a
//   lane), the lane sums multiplied by their block scales and added into the row's accumulators;
// - 2 to 8 input rows: each run's values are multiplied by their block scales (value * scale in
//   float32: the dequantized weight, bit for bit) and the products with x added lane-wise (4 to 8
//   rows: weight rows in pairs, each input vector loaded once for both: pair_tile);
// then the accumulators' lanes are added, times NVFP4's global scale. So the decoded weights are
// the reference decode's; the float32 summation order differs from the AVX2 path's (which sums
// runs of 32 in its own order), as any two float32 GEMMs do: tests hold every path to the same
// float64 reference within float32 GEMM error.
//
// Applies where the block size is 8, 16, 32 or 64 and K (padded) a multiple of 64, or the block
// size a multiple of 128 and K (padded) a multiple of 128 (stream512_applies); the caller takes the
// AVX2 path otherwise. Where K is 64 more than a multiple of 128 (SmolLM2's 576), each row ends in a
// half run: its 32 bytes are loaded under a mask (nothing past the row is read), the other 32 bytes
// read as zero codes, i.e. table[0], so a half run applies only where table[0] is finite; the
// permuted input rows are padded with zeros to a multiple of 128 (stream512_row_floats: the row
// stride of the permuted rows) and the half run's lanes 8 .. 15 read block scales of 1.0 (the
// scale buffer's slots past the row's blocks), so those lanes add table[0] * 1 * 0 = 0: nothing.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "packed_gemm.h"
#include "packed_gemm_cpu.h"
#include "packed_gemm_cpu_path.h"
#include "packed_gemm_stream_tiles.h"
#include "packed_gemm_workers.h"

#if defined(GQ_X86_DISPATCH)
#include <immintrin.h>
// All headers come before: their inline functions and templates keep the build's own options.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#include "packed_gemm_stream_avx512_scales.h"  // AVX-512 code: after the pragma
#endif

namespace groupquant {
namespace packed {

bool stream512_applies(const PackedGemmParams& p, const float* value_table) {
  const int64_t kp = p.num_blocks * p.block_size;
  const int64_t b = p.block_size;
  if (p.code_bits != 4 || b < 8) return false;
  if (b % 128 == 0) return kp % 128 == 0;
  if (64 % b != 0 || kp % 64 != 0) return false;
  return kp % 128 == 0 || std::isfinite(value_table[0]);  // a half run's padding lanes decode to table[0]
}

int64_t stream512_row_floats(const PackedGemmParams& p) { return (p.num_blocks * p.block_size + 127) / 128 * 128; }

#if defined(GQ_X86_DISPATCH)
namespace {

constexpr int64_t kMaxChunkRuns = 64;     // runs of 128 per K chunk (bounds the scale buffer)
constexpr int64_t kPrefetchRows = 4;      // weight rows ahead whose chunk is prefetched (see rows_tile)
constexpr int64_t kPrefetchBytes = 2048;  // per run, this far ahead in a stream of whole rows
constexpr int kGemvRows = 4;              // one input row, whole rows: weight rows decoded together (gemv_group)
constexpr int64_t kAheadGroups = 2;       // and the groups ahead whose bytes are prefetched

// The input rows (kp floats each) in run order, at a row stride of kx (kp rounded up to 128): within
// each run of 128, position 16 t + j <- element 8 j + t, 0 where that element is past the row.
void permute_input(const float* x, int64_t rows, int64_t kp, int64_t kx, float* dst) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* src = x + m * kp;
    float* out = dst + m * kx;
    for (int64_t r = 0; r < kx; r += 128) {
      for (int t = 0; t < 8; ++t)
        for (int j = 0; j < 16; ++j) out[r + 16 * t + j] = r + 8 * j + t < kp ? src[r + 8 * j + t] : 0.0f;
    }
  }
}

// Everything one job's tiles share.
struct Tile {
  const PackedGemmJob* job;
  const float* x;        // permuted input rows
  __m512 table;          // the 16 element values
  __m512i words;         // their bfloat16 bits, twice (the words decode)
  __m512i lane_block;    // lane j -> its block within the run's first block (j * 8 / block_size)
  int64_t kx, rb, runs;  // row stride of x (padded K up to 128), bytes per weight row, runs per row
  int64_t full_runs;     // whole runs of 128 per row (runs - 1 where the row ends in a half run)
  int64_t block_size;
  ScaleKind scale_kind;  // how scale bytes become floats
};

// Per-lane block scales of run r of a row, from the row chunk's scale buffer (the floats of blocks
// b0, b0 + 1, ...).
inline __m512 run_scales(const Tile& t, const float* sbuf, int64_t r, int64_t b0) {
  const int64_t first = r * 128 / t.block_size - b0;
  return _mm512_permutexvar_ps(t.lane_block, _mm512_loadu_ps(sbuf + first));
}

// Whether every table value is exact in bfloat16 (its low 16 bits zero): the words decode applies.
bool bf16_exact(const float* value_table) {
  for (int c = 0; c < 16; ++c) {
    uint32_t bits;
    std::memcpy(&bits, value_table + c, 4);
    if ((bits & 0xFFFFu) != 0) return false;
  }
  return true;
}

// Run r's 64 bytes, at row: where r is a row's half run, its 32 bytes and 32 zero bytes (a masked
// load: nothing past the row is read); kHalf: the rows end in a half run.
template <bool kHalf>
inline __m512i load_run(const Tile& t, const uint8_t* row, int64_t r) {
  if constexpr (!kHalf) return _mm512_loadu_si512(row);  // rows of whole runs: no test per run
  return r < t.full_runs ? _mm512_loadu_si512(row) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, row);
}

// The 128 codes of one 64-byte run as 8 float32 vectors: w[t] lane j = value of code 8j + t.
template <bool kWords>
inline void decode_run(const Tile& t, __m512i raw, __m512* w) {
  if constexpr (kWords) {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (int q = 0; q < 4; ++q) {
      const __m512i b = _mm512_permutexvar_epi16(q == 0 ? raw : _mm512_srli_epi16(raw, 4 * q), t.words);
      w[q] = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
      w[q + 4] = _mm512_castsi512_ps(_mm512_and_si512(b, high));
    }
  } else {
    for (int q = 0; q < 8; ++q) w[q] = _mm512_permutexvar_ps(q == 0 ? raw : _mm512_srli_epi32(raw, 4 * q), t.table);
  }
}

// One run's lane sums for one input row: w[q] . x[q] over q, codes 8j .. 8j + 3 into one chain and
// 8j + 4 .. 8j + 7 into another, added at the end: each sum needs one word permute more than the
// last (chains as w0 w2 w4 w6 / w1 w3 w5 w7 were slower: docs/packed-inference.md, "Tuning figures", avx512).
inline __m512 run_lane_sums(const __m512* w, const __m512* x) {
  __m512 a = _mm512_mul_ps(w[0], x[0]);
  __m512 b = _mm512_mul_ps(w[4], x[4]);
  a = _mm512_fmadd_ps(w[1], x[1], a);
  b = _mm512_fmadd_ps(w[5], x[5], b);
  a = _mm512_fmadd_ps(w[2], x[2], a);
  b = _mm512_fmadd_ps(w[6], x[6], b);
  a = _mm512_fmadd_ps(w[3], x[3], a);
  b = _mm512_fmadd_ps(w[7], x[7], b);
  return _mm512_add_ps(a, b);
}

// Input row m0 alone: part[n + j - n0] += dot products of runs [r0, r1) (the whole row: rb bytes at row)
// with weight rows n + j, j < NR; each run's 8 input vectors are loaded once for the NR rows. The
// group's bytes kAheadGroups groups ahead are prefetched into L2 in memory order (4 rows read at once
// defeat the hardware prefetcher), its scale bytes at the start; see the bfloat16 kernel.
template <int NR, bool kWords, bool kHalf>
void gemv_group(const Tile& t, int64_t m0, int64_t n, int64_t n0, int64_t r0, int64_t r1, int64_t b0, int64_t b1,
                float* part) {
  const PackedGemmJob& job = *t.job;
  const PackedGemmParams& p = job.p;
  alignas(64) float sbuf[NR][kMaxChunkRuns * 16 + 16];  // scales of blocks [b0, b1) (+ slack for the loads)
  const uint8_t* row = job.data + n * t.rb + r0 * 64;     // rows n .. n + NR - 1 follow at rb bytes
  const int64_t ahead = kAheadGroups * kGemvRows * t.rb;
  const uint8_t* scale_ahead = job.scale + (n + kAheadGroups * kGemvRows) * p.num_blocks;
  for (int64_t o = 0; o < NR * p.num_blocks; o += 64) _mm_prefetch(reinterpret_cast<const char*>(scale_ahead + o), _MM_HINT_T1);
  for (int j = 0; j < NR; ++j) {
    fill_scales(t.scale_kind, job.scale_table, job.scale + (n + j) * p.num_blocks + b0, b1 - b0, sbuf[j]);
    std::fill(sbuf[j] + (b1 - b0), sbuf[j] + (b1 - b0) + 16, 1.0f);  // a half run's lanes past the row
  }
  __m512 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm512_setzero_ps();
  const float* xr = t.x + m0 * t.kx + r0 * 128;
  for (int64_t r = r0; r < r1; ++r, xr += 128) {
    const int64_t o = (r - r0) * 64;
    __m512 x[8];
    for (int q = 0; q < 8; ++q) x[q] = _mm512_loadu_ps(xr + 16 * q);
    for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(row + ahead + o * NR + j * 64), _MM_HINT_T1);
      __m512 w[8];
      decode_run<kWords>(t, load_run<kHalf>(t, row + j * t.rb + o, r), w);
      acc[j] = _mm512_fmadd_ps(run_lane_sums(w, x), run_scales(t, sbuf[j], r, b0), acc[j]);
    }
  }
  for (int j = 0; j < NR; ++j) part[n + j - n0] += _mm512_reduce_add_ps(acc[j]);
}

// part[(n + j - n0) * MR + m] += dot products of runs [r0, r1) for input rows m0 .. m0 + MR and the
// weight rows n, n + 1 (4 to 8 input rows): each run is taken a quarter at a time (codes 8j + q and
// 8j + 4 + q of both rows, dequantized), so that each input vector loaded serves both rows (docs/packed-inference.md, "Tuning figures",
// avx512; more rows at once would not leave registers for 8 input rows).
template <int MR, bool kWords, bool kHalf>
void pair_tile(const Tile& t, int64_t m0, int64_t n, int64_t n0, int64_t r0, int64_t r1, int64_t b0, int64_t b1,
               bool whole, int64_t span, int64_t n1, float* part) {
  const PackedGemmJob& job = *t.job;
  const PackedGemmParams& p = job.p;
  alignas(64) float sbuf[2][kMaxChunkRuns * 16 + 16];
  const uint8_t* row[2];
  for (int j = 0; j < 2; ++j) {
    row[j] = job.data + (n + j) * t.rb + r0 * 64;
    if (n + j + kPrefetchRows < n1) {
      const uint8_t* ahead = row[j] + kPrefetchRows * t.rb;
      for (int64_t o = 0; o < span; o += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T0);
    }
    fill_scales(t.scale_kind, job.scale_table, job.scale + (n + j) * p.num_blocks + b0, b1 - b0, sbuf[j]);
    std::fill(sbuf[j] + (b1 - b0), sbuf[j] + (b1 - b0) + 16, 1.0f);
  }
  __m512 acc[MR][2];
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const float* xr = t.x + m0 * t.kx + r0 * 128;
  for (int64_t r = r0; r < r1; ++r, xr += 128) {
    const int64_t o = (r - r0) * 64;
    __m512i raw[2];
    __m512 s[2];
    for (int j = 0; j < 2; ++j) {
      if (whole) _mm_prefetch(reinterpret_cast<const char*>(row[j] + o + kPrefetchBytes), _MM_HINT_T0);
      raw[j] = load_run<kHalf>(t, row[j] + o, r);
      s[j] = run_scales(t, sbuf[j], r, b0);
    }
    for (int q = 0; q < 4; ++q) {
      __m512 lo[2], hi[2];  // codes 8j + q and 8j + 4 + q of each row, times their block scales
      for (int j = 0; j < 2; ++j) {
        if constexpr (kWords) {
          const __m512i b = _mm512_permutexvar_epi16(q == 0 ? raw[j] : _mm512_srli_epi16(raw[j], 4 * q), t.words);
          lo[j] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(b, 16)), s[j]);
          hi[j] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(b, high)), s[j]);
        } else {
          lo[j] = _mm512_mul_ps(_mm512_permutexvar_ps(q == 0 ? raw[j] : _mm512_srli_epi32(raw[j], 4 * q), t.table), s[j]);
          hi[j] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(raw[j], 4 * (q + 4)), t.table), s[j]);
        }
      }
      for (int m = 0; m < MR; ++m) {
        const float* xm = xr + m * t.kx;
        const __m512 xl = _mm512_loadu_ps(xm + 16 * q), xh = _mm512_loadu_ps(xm + 16 * (q + 4));
        for (int j = 0; j < 2; ++j) acc[m][j] = _mm512_fmadd_ps(hi[j], xh, _mm512_fmadd_ps(lo[j], xl, acc[m][j]));
      }
    }
  }
  for (int j = 0; j < 2; ++j)
    for (int m = 0; m < MR; ++m) part[(n + j - n0) * MR + m] += _mm512_reduce_add_ps(acc[m][j]);
}

// part[(n - n0) * MR + m] += dot products of runs [r0, r1) for input rows m0 .. m0 + MR, weight
// rows [n0, n1).
// Software prefetch: where the chunk is part of a row (the task reads pieces of rows at a stride),
// the row's chunk kPrefetchRows ahead, at the row's start; where a chunk is the whole row (one
// input row and K up to the chunk: the task's rows are one ascending stream) one line per run,
// kPrefetchBytes ahead (past the end of the data too: a prefetch does not fault); the burst at
// every row (as for partial rows) was slower than none for the bfloat16 kernel (docs/packed-inference.md, "Tuning figures",
// avx512 and avx512_bf16).
template <int MR, bool kWords, bool kHalf>
void rows_tile(const Tile& t, int64_t m0, int64_t n0, int64_t n1, int64_t r0, int64_t r1, float* part) {
  const PackedGemmJob& job = *t.job;
  const PackedGemmParams& p = job.p;
  const int64_t b0 = r0 * 128 / p.block_size;
  const int64_t b1 = std::min(p.num_blocks, (r1 * 128 + p.block_size - 1) / p.block_size);
  alignas(64) float sbuf[kMaxChunkRuns * 16 + 16];  // scales of blocks [b0, b1) (+ slack for the loads)
  const bool whole = r1 - r0 == t.runs;              // the chunk is the whole row
  const int64_t span = whole ? 0 : (r1 - r0) * 64;  // bytes to prefetch per row ahead
  if constexpr (MR == 1) {
    if (whole) {  // one ascending stream of whole rows: in groups of kGemvRows
      int64_t n = n0;
      for (; n + kGemvRows <= n1; n += kGemvRows) gemv_group<kGemvRows, kWords, kHalf>(t, m0, n, n0, r0, r1, b0, b1, part);
      for (; n < n1; ++n) gemv_group<1, kWords, kHalf>(t, m0, n, n0, r0, r1, b0, b1, part);
      return;
    }
  }
  int64_t n_first = n0;
  if constexpr (MR >= 4) {  // weight rows in pairs (2 and 3 rows: no faster over a cycle of layers)
    for (; n_first + 2 <= n1; n_first += 2) pair_tile<MR, kWords, kHalf>(t, m0, n_first, n0, r0, r1, b0, b1, whole, span, n1, part);
  }
  for (int64_t n = n_first; n < n1; ++n) {
    const uint8_t* row = job.data + n * t.rb + r0 * 64;
    if (n + kPrefetchRows < n1) {
      const uint8_t* ahead = row + kPrefetchRows * t.rb;
      for (int64_t o = 0; o < span; o += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T0);
    }
    const uint8_t* sc = job.scale + n * p.num_blocks;
    fill_scales(t.scale_kind, job.scale_table, sc + b0, b1 - b0, sbuf);
    std::fill(sbuf + (b1 - b0), sbuf + (b1 - b0) + 16, 1.0f);  // a half run's lanes past the row
    const float* xr = t.x + m0 * t.kx + r0 * 128;
    float* out = part + (n - n0) * MR;
    if constexpr (MR == 1) {
      __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
      for (int64_t r = r0; r < r1; ++r, row += 64, xr += 128) {
        if (whole) _mm_prefetch(reinterpret_cast<const char*>(row + kPrefetchBytes), _MM_HINT_T0);
        __m512 w[8];
        decode_run<kWords>(t, load_run<kHalf>(t, row, r), w);
        __m512 x[8];
        for (int q = 0; q < 8; ++q) x[q] = _mm512_loadu_ps(xr + 16 * q);
        const __m512 lanes = run_lane_sums(w, x);
        const __m512 s = run_scales(t, sbuf, r, b0);
        if ((r & 1) == 0) {
          acc0 = _mm512_fmadd_ps(lanes, s, acc0);
        } else {
          acc1 = _mm512_fmadd_ps(lanes, s, acc1);
        }
      }
      out[0] += _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    } else {
      constexpr int A = MR >= 4 ? 1 : 2;  // accumulators per input row (FMA latency)
      __m512 acc[MR][A];
      for (int m = 0; m < MR; ++m)
        for (int a = 0; a < A; ++a) acc[m][a] = _mm512_setzero_ps();
      for (int64_t r = r0; r < r1; ++r, row += 64, xr += 128) {
        if (whole) _mm_prefetch(reinterpret_cast<const char*>(row + kPrefetchBytes), _MM_HINT_T0);
        const __m512i raw = load_run<kHalf>(t, row, r);
        const __m512 s = run_scales(t, sbuf, r, b0);
        __m512 w[8];
        decode_run<kWords>(t, raw, w);
        for (int q = 0; q < 8; ++q) w[q] = _mm512_mul_ps(w[q], s);  // dequantized weights
        for (int m = 0; m < MR; ++m) {
          const float* xm = xr + m * t.kx;
          for (int q = 0; q < 8; ++q)
            acc[m][q % A] = _mm512_fmadd_ps(w[q], _mm512_loadu_ps(xm + 16 * q), acc[m][q % A]);
        }
      }
      for (int m = 0; m < MR; ++m) {
        __m512 sum = acc[m][0];
        for (int a = 1; a < A; ++a) sum = _mm512_add_ps(sum, acc[m][a]);
        out[m] += _mm512_reduce_add_ps(sum);
      }
    }
  }
}

// Input floats per K chunk, all rows of a tile together: for 1 or 2 rows 32 KiB (K up to 4096 in
// one chunk with 2 rows: the weight rows are read as one stream), else 16 KiB (in L1); measured in
// docs/packed-inference.md, "Tuning figures" (avx512).
constexpr int64_t chunk_floats(int rows) { return rows <= 2 ? 8192 : 4096; }

// Rows m0 .. m0 + MR of the output for weight rows [n0, n1), K in chunks of runs (stream_chunks).
template <int MR, bool kWords>
void rows_all_chunks(const Tile& t, int64_t m0, int64_t n0, int64_t n1, float* part) {
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(kMaxChunkRuns, chunk_floats(MR) / MR / 128));
  stream_chunks<MR>(*t.job, m0, n0, n1, t.runs, chunk, part, [&](int64_t r0, int64_t r1) {
    if (t.full_runs == t.runs) {
      rows_tile<MR, kWords, false>(t, m0, n0, n1, r0, r1, part);
    } else {
      rows_tile<MR, kWords, true>(t, m0, n0, n1, r0, r1, part);
    }
  });
}

}  // namespace

bool run_packed_stream_avx512(const PackedGemmJob& job, float* scratch) {
  const PackedGemmParams& p = job.p;
  if (!stream512_applies(p, job.value_table)) return false;
  Tile t{};
  t.job = &job;
  const int64_t kp = p.num_blocks * p.block_size;
  t.kx = stream512_row_floats(p);
  t.rb = row_bytes(p);
  t.runs = t.kx / 128;
  t.full_runs = kp / 128;
  t.block_size = p.block_size;
  t.scale_kind = scale_kind(job.scale_table);
  t.table = _mm512_loadu_ps(job.value_table);
  t.words = bf16_word_table(job.value_table);
  t.lane_block = run_lane_blocks(p.block_size);
  permute_input(job.x, job.rows, kp, t.kx, scratch);
  t.x = scratch;
  const bool words = bf16_exact(job.value_table);
  stream_row_tasks(job, [&](auto tile_rows, int64_t m0, int64_t n0, int64_t n1, float* part) {
    constexpr int kRows = decltype(tile_rows)::value;
    if (words) {
      rows_all_chunks<kRows, true>(t, m0, n0, n1, part);
    } else {
      rows_all_chunks<kRows, false>(t, m0, n0, n1, part);
    }
  });
  return true;
}

#else

bool run_packed_stream_avx512(const PackedGemmJob&, float*) { return false; }

#endif

}  // namespace packed
}  // namespace groupquant
