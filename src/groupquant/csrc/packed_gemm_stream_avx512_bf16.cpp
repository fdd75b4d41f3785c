// The streaming kernel of the packed GEMM for few bfloat16 input rows, AVX-512 BF16 sub-path
// (path avx512_bf16: AVX-512 F/BW/VL/DQ + BF16; compiled with those target options on every x86
// build, taken where the host has them: packed_gemm_cpu_path.h), for 4-bit codes whose 16 table
// values are exact in bfloat16 (FP4 E2M1, INT4) and multiples of 2^-8 no larger than 2^8.
//
// Decode: a run of 128 codes is 64 bytes, one 512-bit load: 32 words of 4 codes each. A word
// permute (vpermw) of the 16 table values' bfloat16 bits, held twice in a 32-entry table so that
// bit 4 of each index does not matter, by the words gives code 4w of every word w; shifting the
// words by 4, 8, 12 gives codes 4w + 1, 4w + 2, 4w + 3. So one load, three shifts and four
// permutes decode 128 codes into four vectors of 32 bfloat16 values. vdpbf16ps then adds, into
// fp32 lane i, the products of words 2i and 2i + 1 (elements 8i + t and 8i + 4 + t of vector t),
// so lane i covers elements 8i .. 8i + 7, as in the float32 AVX-512 kernel: per-lane block scales
// (blocks of 8, 16, 32, 64 or multiples of 128). The input rows are permuted once per call to
// match (within every run of 128: position 32 t + 2 i + h <- element 8 i + 4 h + t).
//
// Applies where the float32 AVX-512 kernel does (stream512_applies: K (padded) a multiple of 64
// for blocks of 8 .. 64, of 128 for larger blocks) and the table is as above. A row that ends in a
// half run (K 64 more than a multiple of 128) is handled as there: its last 32 bytes are loaded
// under a mask, the other 32 read as zero codes (table[0], finite), the input rows are padded with
// zero bfloat16 values to a multiple of 128 (the permuted rows' stride) and lanes 8 .. 15 read block
// scales of 1.0, so those lanes' dot products are exact zeros: the argument below is unchanged.
//
// Exactness. vdpbf16ps treats subnormal inputs as zero and flushes subnormal results whatever
// MXCSR says (and rounds to nearest even), so each input row m is first scaled by a power of two
// 2^e_m: e_m = 0 where the row's nonzero finite magnitudes lie in [2^-100, 2^64) already (the
// usual case: then nothing is scaled back either), else the e_m that brings its largest finite
// magnitude into [1, 2) (clamped to [-126, 126]); that product is exact, and so is the bfloat16
// conversion of an input that was bfloat16. The kernel takes a call only where every row's
// nonzero finite magnitudes are then at least 2^-100 (else run_packed_stream_avx512_bf16 returns
// false and the float32 kernel runs): scaled inputs are multiples of 2^-107 and the table values
// multiples of 2^-8, so every product and partial sum is zero or at least 2^-115 in magnitude and
// below 2^75 (8 products of less than 2^64 * 2^8 per lane): nothing is flushed, nothing
// overflows, and each product is exact in float32 (8 x 8 significant bits). Each run's lane sums
// are multiplied by 2^-e_m where e_m != 0 (exact back-scaling, giving float32's unscaled lane
// sums up to their own rounding; a tile whose rows all have e_m = 0 skips it) and then FMA'd with
// the lane's block scale into float32 accumulators, as the float32 kernel does with one input row
// (so NVFP4's E4M3 scales are applied to float32 sums, the global scale to the row sum). Subnormal
// inputs are thus kept exactly; NaN / Inf inputs and NaN scales propagate as in float32 arithmetic.
// Outputs differ from the float32 kernel's only in the float32 summation order and rounding.
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
// All headers come before: their inline functions and templates keep the build's own options.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")
#include "packed_gemm_stream_avx512_scales.h"  // AVX-512 code: after the pragma
#endif

namespace groupquant {
namespace packed {

bool stream512_bf16_applies(const PackedGemmParams& p, const float* value_table) {
  if (!stream512_applies(p, value_table)) return false;
  for (int c = 0; c < 16; ++c) {
    const float v = value_table[c];
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const float scaled = v * 256.0f;  // exact for |v| <= 2^8
    if ((bits & 0xFFFFu) != 0 || !std::isfinite(v) || std::fabs(v) > 256.0f || std::floor(scaled) != scaled) {
      return false;
    }
  }
  return true;
}

#if defined(GQ_X86_DISPATCH)
namespace {

constexpr int64_t kMaxChunkRuns = 64;     // runs of 128 per K chunk (bounds the scale buffer)
constexpr int64_t kPrefetchRows = 4;      // weight rows ahead whose chunk is prefetched (see rows_tile)
constexpr int64_t kPrefetchBytes = 2048;  // per run, this far ahead in a stream of whole rows
constexpr int kGemvRows = 4;               // weight rows decoded together for one input row (see rows_group)
constexpr int64_t kAheadGroups = 2;        // one input row, whole rows: groups ahead whose bytes are prefetched

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

// The scaled input rows (kp values each) as bfloat16 in run order at a row stride of kx (kp rounded
// up to 128; zeros past the row): within every run of 128, position 32 t + 2 i + h <- element
// 8 i + 4 h + t; false where a row's range does not fit (packed_gemm_stream_bf16_rows.h).
bool prepare_input(const float* x, int64_t rows, int64_t kp, int64_t kx, uint16_t* dst, float* unscale) {
  return prepare_bf16_rows<128>(x, rows, kp, dst, unscale, kx, [](int p) {
    const int t = p / 32, i = (p % 32) / 2, h = p % 2;
    return 8 * i + 4 * h + t;
  });
}

// Everything one job's tiles share.
struct Tile {
  const PackedGemmJob* job;
  const uint16_t* x;      // scaled, permuted bfloat16 input rows
  const float* unscale;   // per input row: 2^-e
  __m512i table;          // the 16 values' bfloat16 bits, twice
  __m512i lane_block;     // lane i -> its block within the run's first block (i * 8 / block_size)
  int64_t kx, rb, runs;   // row stride of x (padded K up to 128), bytes per weight row, runs per row
  int64_t full_runs;      // whole runs of 128 per row (runs - 1 where the row ends in a half run)
  int64_t block_size;
  ScaleKind scale_kind;   // how scale bytes become floats
};

// Per-lane block scales of a run whose first block is sbuf[first].
inline __m512 run_scales(const Tile& t, const float* sbuf, int32_t first) {
  return _mm512_permutexvar_ps(t.lane_block, _mm512_loadu_ps(sbuf + first));
}

inline __m512bh decode(const Tile& t, __m512i raw, int shift) {
  return as_bh(_mm512_permutexvar_epi16(shift == 0 ? raw : _mm512_srli_epi16(raw, shift), t.table));
}

// Run r's 64 bytes, at row: where r is a row's half run, its 32 bytes and 32 zero bytes (a masked
// load: nothing past the row is read); kHalf: the rows end in a half run.
template <bool kHalf>
inline __m512i load_run(const Tile& t, const uint8_t* row, int64_t r) {
  if constexpr (!kHalf) return _mm512_loadu_si512(row);  // rows of whole runs: no test per run
  return r < t.full_runs ? _mm512_loadu_si512(row) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, row);
}

inline __m512bh xload(const uint16_t* p) { return as_bh(_mm512_loadu_si512(p)); }

// One K chunk of a task: runs [r0, r1) of weight rows [n0, n1), their blocks [b0, b1).
struct Chunk {
  int64_t n0, n1, r0, r1, b0, b1;
  bool whole;                        // the chunk is the whole row (the rows are one ascending stream)
  int64_t ahead;                     // whole rows: bytes from a group's first row to the one prefetched
  int64_t scale_ahead;               // whole rows in groups: rows ahead whose scale bytes are prefetched (0: none)
  int32_t first[kMaxChunkRuns];      // run r0 + i starts at block b0 + first[i]
};

// part[(n + j - n0) * MR + m] += dot products of the chunk's runs for input rows m0 .. m0 + MR and
// weight rows n + j, j < NR: each run's NR weight rows are decoded, then each input row's 4 loads
// serve all NR of them. With one input row, 4 rows at a time (kGemvRows): an input load per dot
// product instruction was what bounded a row in cache.
// Software prefetch, where a chunk is part of a row (the task reads pieces of rows at a stride):
// the row's chunk kPrefetchRows ahead, at the row's start. Where a chunk is the whole row, the
// task's rows are one ascending stream: one line per run and row, kPrefetchBytes ahead; in groups
// of 4 rows, which read 4 places 1 row apart at once, the hardware prefetcher no longer follows
// the stream, so the group kAheadGroups ahead is prefetched into L2 in its memory order, one line
// per run and row, and its scale bytes at the group's start (past the end of the data too: a
// prefetch does not fault). Figures for all of this: docs/packed-inference.md, "Tuning figures", avx512_bf16.
template <int MR, int NR, bool kUnit, bool kHalf>
void rows_group(const Tile& t, const Chunk& c, int64_t m0, int64_t n, float* part) {
  const PackedGemmJob& job = *t.job;
  const PackedGemmParams& p = job.p;
  alignas(64) float sbuf[NR][kMaxChunkRuns * 16 + 16];  // scales of blocks [b0, b1) (+ slack for the loads)
  const uint8_t* row[NR];
  const int64_t span = c.whole ? 0 : (c.r1 - c.r0) * 64;  // bytes to prefetch per row ahead
  if (c.scale_ahead > 0) {  // the scale bytes of the rows whose codes are prefetched below
    const uint8_t* ahead = job.scale + (n + c.scale_ahead) * p.num_blocks;
    for (int64_t o = 0; o < NR * p.num_blocks; o += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T1);
  }
  for (int j = 0; j < NR; ++j) {
    row[j] = job.data + (n + j) * t.rb + c.r0 * 64;
    if (n + j + kPrefetchRows < c.n1) {
      const uint8_t* ahead = row[j] + kPrefetchRows * t.rb;
      for (int64_t o = 0; o < span; o += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T0);
    }
    fill_scales(t.scale_kind, job.scale_table, job.scale + (n + j) * p.num_blocks + c.b0, c.b1 - c.b0, sbuf[j]);
    std::fill(sbuf[j] + (c.b1 - c.b0), sbuf[j] + (c.b1 - c.b0) + 16, 1.0f);  // a half run's lanes past the row
  }
  __m512 u[MR];
  for (int m = 0; m < MR; ++m) u[m] = _mm512_set1_ps(t.unscale[m0 + m]);
  const __m512 zero = _mm512_setzero_ps();
  __m512 acc[NR][MR];
  for (int j = 0; j < NR; ++j)
    for (int m = 0; m < MR; ++m) acc[j][m] = zero;
  const uint16_t* xr = t.x + m0 * t.kx + c.r0 * 128;
  for (int64_t r = c.r0; r < c.r1; ++r, xr += 128) {
    const int64_t o = (r - c.r0) * 64;
    __m512bh w[NR][4];
    __m512 s[NR];
    for (int j = 0; j < NR; ++j) {
      if (c.whole) _mm_prefetch(reinterpret_cast<const char*>(row[0] + c.ahead + o * NR + j * 64), _MM_HINT_T1);
      const __m512i raw = load_run<kHalf>(t, row[j] + o, r);
      for (int q = 0; q < 4; ++q) w[j][q] = decode(t, raw, 4 * q);
      s[j] = run_scales(t, sbuf[j], c.first[r - c.r0]);
    }
    for (int m = 0; m < MR; ++m) {
      const uint16_t* xm = xr + m * t.kx;
      const __m512bh x0 = xload(xm), x1 = xload(xm + 32), x2 = xload(xm + 64), x3 = xload(xm + 96);
      for (int j = 0; j < NR; ++j) {
        __m512 d = _mm512_dpbf16_ps(zero, w[j][0], x0);
        d = _mm512_dpbf16_ps(d, w[j][1], x1);
        d = _mm512_dpbf16_ps(d, w[j][2], x2);
        d = _mm512_dpbf16_ps(d, w[j][3], x3);
        acc[j][m] = _mm512_fmadd_ps(kUnit ? d : _mm512_mul_ps(d, u[m]), s[j], acc[j][m]);  // unscaled lane sums
      }
    }
  }
  for (int j = 0; j < NR; ++j)
    for (int m = 0; m < MR; ++m) part[(n + j - c.n0) * MR + m] += _mm512_reduce_add_ps(acc[j][m]);
}

// Weight rows per group: 4 for one input row, 2 for two (faster, docs/packed-inference.md, "Tuning figures"), else 1.
template <int MR>
constexpr int group_rows() { return MR == 1 ? kGemvRows : (MR == 2 ? 2 : 1); }

template <int MR, bool kUnit, bool kHalf>
void rows_tile(const Tile& t, int64_t m0, int64_t n0, int64_t n1, int64_t r0, int64_t r1, float* part) {
  const PackedGemmParams& p = t.job->p;
  Chunk c;
  c.n0 = n0;
  c.n1 = n1;
  c.r0 = r0;
  c.r1 = r1;
  c.b0 = r0 * 128 / p.block_size;
  c.b1 = std::min(p.num_blocks, (r1 * 128 + p.block_size - 1) / p.block_size);
  c.whole = r1 - r0 == t.runs;
  constexpr int NR = group_rows<MR>();
  c.ahead = NR > 1 ? kAheadGroups * NR * t.rb : kPrefetchBytes;
  c.scale_ahead = NR > 1 && c.whole ? kAheadGroups * NR : 0;
  for (int64_t r = r0; r < r1; ++r) c.first[r - r0] = static_cast<int32_t>(r * 128 / p.block_size - c.b0);
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) rows_group<MR, NR, kUnit, kHalf>(t, c, m0, n, part);
  for (; n < n1; ++n) rows_group<MR, 1, kUnit, kHalf>(t, c, m0, n, part);
}

// Input bfloat16 values per K chunk, all rows of a tile together: up to 4 rows, 32 KiB (K up to 4096
// is one chunk, so the weight rows are read as one stream; docs/packed-inference.md, "Tuning figures", avx512_bf16), else 16 KiB (in L1).
constexpr int64_t chunk_values(int rows) { return rows <= 4 ? 16384 : 8192; }

// Rows m0 .. m0 + MR of the output for weight rows [n0, n1), K in chunks of runs (stream_chunks).
template <int MR, bool kUnit>
void rows_all_chunks(const Tile& t, int64_t m0, int64_t n0, int64_t n1, float* part) {
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(kMaxChunkRuns, chunk_values(MR) / MR / 128));
  stream_chunks<MR>(*t.job, m0, n0, n1, t.runs, chunk, part, [&](int64_t r0, int64_t r1) {
    if (t.full_runs == t.runs) {
      rows_tile<MR, kUnit, false>(t, m0, n0, n1, r0, r1, part);
    } else {
      rows_tile<MR, kUnit, true>(t, m0, n0, n1, r0, r1, part);
    }
  });
}

}  // namespace

bool run_packed_stream_avx512_bf16(const PackedGemmJob& job, void* scratch, float* unscale) {
  const PackedGemmParams& p = job.p;
  if (!stream512_bf16_applies(p, job.value_table)) return false;
  Tile t{};
  t.job = &job;
  const int64_t kp = p.num_blocks * p.block_size;
  t.kx = stream512_row_floats(p);
  t.rb = row_bytes(p);
  t.runs = t.kx / 128;
  t.full_runs = kp / 128;
  t.block_size = p.block_size;
  t.scale_kind = scale_kind(job.scale_table);
  uint16_t* xs = static_cast<uint16_t*>(scratch);
  if (!prepare_input(job.x, job.rows, kp, t.kx, xs, unscale)) return false;
  t.x = xs;
  t.unscale = unscale;
  t.table = bf16_word_table(job.value_table);
  t.lane_block = run_lane_blocks(p.block_size);
  stream_row_tasks(job, [&](auto tile_rows, int64_t m0, int64_t n0, int64_t n1, float* part) {
    constexpr int kRows = decltype(tile_rows)::value;
    if (std::all_of(unscale + m0, unscale + m0 + kRows, [](float u) { return u == 1.0f; })) {
      rows_all_chunks<kRows, true>(t, m0, n0, n1, part);
    } else {
      rows_all_chunks<kRows, false>(t, m0, n0, n1, part);
    }
  });
  return true;
}

#else

bool run_packed_stream_avx512_bf16(const PackedGemmJob&, void*, float*) { return false; }

#endif

}  // namespace packed
}  // namespace groupquant
