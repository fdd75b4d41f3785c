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

constexpr int kMaxRows = kStreamTileRows;  // input rows per register tile
constexpr int64_t kL1Values = 8192;       // input bfloat16 values per K chunk (16 KiB, in L1)
constexpr int64_t kRowsPerPass = 64;      // weight rows per task
constexpr int64_t kMaxChunkRuns = 64;     // runs of 128 per K chunk (bounds the scale buffer)
constexpr int64_t kPrefetchRows = 4;      // weight rows ahead whose chunk is prefetched (see rows_tile)
constexpr int64_t kPrefetchBytes = 2048;  // per run, this far ahead in a stream of whole rows

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

// part[(n - n0) * MR + m] += dot products of runs [r0, r1) for input rows m0 .. m0 + MR, weight
// rows [n0, n1).
// Software prefetch: where the chunk is part of a row (the task reads pieces of rows at a stride),
// the row's chunk kPrefetchRows ahead, at the row's start; where a chunk is the whole row (one
// input row and K up to the chunk: the task's rows are one ascending stream) one line per run,
// kPrefetchBytes ahead (past the end of the data too: a prefetch does not fault). On AMD Zen 4,
// over a decode-like cycle of 16 4096 x 4096 layers, the per-run prefetch made the float32 kernel
// 1.7x and the bfloat16 one 1.2x faster than none, and the burst at every row (as for partial
// rows) was slower than none for the bfloat16 kernel.
template <int MR, bool kUnit, bool kHalf>
void rows_tile(const Tile& t, int64_t m0, int64_t n0, int64_t n1, int64_t r0, int64_t r1, float* part) {
  const PackedGemmJob& job = *t.job;
  const PackedGemmParams& p = job.p;
  const int64_t b0 = r0 * 128 / p.block_size;
  const int64_t b1 = std::min(p.num_blocks, (r1 * 128 + p.block_size - 1) / p.block_size);
  alignas(64) float sbuf[kMaxChunkRuns * 16 + 16];  // scales of blocks [b0, b1) (+ slack for the loads)
  int32_t first[kMaxChunkRuns];                     // run r0 + i starts at block b0 + first[i]
  for (int64_t r = r0; r < r1; ++r) first[r - r0] = static_cast<int32_t>(r * 128 / p.block_size - b0);
  __m512 u[MR];
  for (int m = 0; m < MR; ++m) u[m] = _mm512_set1_ps(t.unscale[m0 + m]);
  const __m512 zero = _mm512_setzero_ps();
  const bool whole = r1 - r0 == t.runs;              // the chunk is the whole row
  const int64_t span = whole ? 0 : (r1 - r0) * 64;  // bytes to prefetch per row ahead
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = job.data + n * t.rb + r0 * 64;
    if (n + kPrefetchRows < n1) {
      const uint8_t* ahead = row + kPrefetchRows * t.rb;
      for (int64_t o = 0; o < span; o += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + o), _MM_HINT_T0);
    }
    const uint8_t* sc = job.scale + n * p.num_blocks;
    fill_scales(t.scale_kind, job.scale_table, sc + b0, b1 - b0, sbuf);
    std::fill(sbuf + (b1 - b0), sbuf + (b1 - b0) + 16, 1.0f);  // a half run's lanes past the row
    const uint16_t* xr = t.x + m0 * t.kx + r0 * 128;
    float* out = part + (n - n0) * MR;
    if constexpr (MR == 1) {
      __m512 acc0 = zero, acc1 = zero;
      for (int64_t r = r0; r < r1; ++r, row += 64, xr += 128) {
        if (whole) _mm_prefetch(reinterpret_cast<const char*>(row + kPrefetchBytes), _MM_HINT_T0);
        const __m512i raw = load_run<kHalf>(t, row, r);
        __m512 a = _mm512_dpbf16_ps(zero, decode(t, raw, 0), xload(xr));
        __m512 b = _mm512_dpbf16_ps(zero, decode(t, raw, 4), xload(xr + 32));
        a = _mm512_dpbf16_ps(a, decode(t, raw, 8), xload(xr + 64));
        b = _mm512_dpbf16_ps(b, decode(t, raw, 12), xload(xr + 96));
        const __m512 s = run_scales(t, sbuf, first[r - r0]);
        const __m512 sum = _mm512_add_ps(a, b);
        const __m512 lane = kUnit ? sum : _mm512_mul_ps(sum, u[0]);  // unscaled lane sums
        if ((r & 1) == 0) {
          acc0 = _mm512_fmadd_ps(lane, s, acc0);
        } else {
          acc1 = _mm512_fmadd_ps(lane, s, acc1);
        }
      }
      out[0] += _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    } else {
      __m512 acc[MR];
      for (int m = 0; m < MR; ++m) acc[m] = zero;
      for (int64_t r = r0; r < r1; ++r, row += 64, xr += 128) {
        if (whole) _mm_prefetch(reinterpret_cast<const char*>(row + kPrefetchBytes), _MM_HINT_T0);
        const __m512i raw = load_run<kHalf>(t, row, r);
        const __m512bh w0 = decode(t, raw, 0), w1 = decode(t, raw, 4), w2 = decode(t, raw, 8), w3 = decode(t, raw, 12);
        const __m512 s = run_scales(t, sbuf, first[r - r0]);
        for (int m = 0; m < MR; ++m) {
          const uint16_t* xm = xr + m * t.kx;
          __m512 d = _mm512_dpbf16_ps(zero, w0, xload(xm));
          d = _mm512_dpbf16_ps(d, w1, xload(xm + 32));
          d = _mm512_dpbf16_ps(d, w2, xload(xm + 64));
          d = _mm512_dpbf16_ps(d, w3, xload(xm + 96));
          acc[m] = _mm512_fmadd_ps(kUnit ? d : _mm512_mul_ps(d, u[m]), s, acc[m]);
        }
      }
      for (int m = 0; m < MR; ++m) out[m] += _mm512_reduce_add_ps(acc[m]);
    }
  }
}

template <int MR, bool kUnit>
void rows_all_chunks(const Tile& t, int64_t m0, int64_t n0, int64_t n1, float post, float* part) {
  const PackedGemmJob& job = *t.job;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(kMaxChunkRuns, kL1Values / MR / 128));
  std::fill(part, part + (n1 - n0) * MR, 0.0f);
  for (int64_t r0 = 0; r0 < t.runs; r0 += chunk) {
    if (t.full_runs == t.runs) {
      rows_tile<MR, kUnit, false>(t, m0, n0, n1, r0, std::min(t.runs, r0 + chunk), part);
    } else {
      rows_tile<MR, kUnit, true>(t, m0, n0, n1, r0, std::min(t.runs, r0 + chunk), part);
    }
  }
  for (int64_t n = n0; n < n1; ++n) {
    const float b = job.bias != nullptr ? job.bias[n] : 0.0f;
    for (int m = 0; m < MR; ++m) job.out[(m0 + m) * job.p.out_features + n] = part[(n - n0) * MR + m] * post + b;
  }
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
  const float post = p.has_global_scale ? p.global_scale : 1.0f;  // NVFP4's second scale, on the row sums
  const int threads = kernel_threads(p.out_features * p.num_blocks * p.block_size * job.rows);
  claim_chunks(p.out_features, kRowsPerPass, threads, [&](int64_t n0, int64_t n1) {
    float part[kRowsPerPass * kMaxRows];
    for_each_row_tile(job.rows, [&](auto tile_rows, int64_t m0) {
      constexpr int kRows = decltype(tile_rows)::value;
      if (std::all_of(unscale + m0, unscale + m0 + kRows, [](float u) { return u == 1.0f; })) {
        rows_all_chunks<kRows, true>(t, m0, n0, n1, post, part);
      } else {
        rows_all_chunks<kRows, false>(t, m0, n0, n1, post, part);
      }
    });
  });
  return true;
}

#else

bool run_packed_stream_avx512_bf16(const PackedGemmJob&, void*, float*) { return false; }

#endif

}  // namespace packed
}  // namespace groupquant
