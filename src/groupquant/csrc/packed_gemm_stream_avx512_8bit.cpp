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
//   block scale (value * scale in float32: the dequantized weight, bit for bit), FMA'd with x.
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
#endif

namespace groupquant {
namespace packed {

#if defined(GQ_X86_DISPATCH)
namespace {

constexpr int64_t kL1Bytes = 65536;       // input bytes per K chunk (L2; 16 KiB chunks measured slower at batch 8)
constexpr int64_t kRowsPerPass = 64;      // weight rows per task
constexpr int64_t kMaxChunkRuns = 128;    // runs of 64 per K chunk (bounds the scale buffer)

// The hot loop's helpers and lambdas must inline (GCC otherwise calls the per-run step out of line).
#define GQ_K8_INLINE __attribute__((always_inline))

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

// The value table as byte tables for vpermi2b, and the lane -> block map.
struct Tile {
  const PackedGemmJob* job;
  const void* x;          // permuted input rows (float32, or scaled bfloat16)
  const float* unscale;   // bfloat16 kernel, per input row: 2^-e
  __m512i hi[4], lo[4];   // high / low bytes of the values' bfloat16 bits, codes 64 i .. 64 i + 63
  __m512i lane_block;     // float32 lane i -> its block within the run's first block
  int lane_blocks;        // blocks per run of 64 as the lanes see them: 1 (blocks of 64 or more), 2 or 4
  bool e8m0;              // the scale table is E8M0's (2^(b - 127), 0xFF NaN): scales decoded arithmetically
  int64_t kp, rb, runs;   // padded K, bytes per weight row, runs of 64 per row
  int kind;               // kSignMagnitude, kTwosComplement or kAnyTable (load_tables)
};

// How a code's sign is found (the decoders' Kind):
// - kSignMagnitude: table[c | 0x80] is table[c] with the sign bit flipped (NaN: both NaN), every
//   c < 128: bytes looked up by the low 7 bits, the sign XOR'd in (FP8).
// - kTwosComplement: table[0] is +0, table[c] for c != 0 the entry of magnitude |int8(c)| with the
//   sign of int8(c) (MXINT8: int8(c) * 2^-6): bytes looked up by |int8(c)| - 1 (vpabsb gives 128
//   for -128), zero codes masked to +0, the sign XOR'd in.
// - kAnyTable: both 128-entry halves looked up, blended by bit 7.
enum Kind : int { kSignMagnitude = 0, kTwosComplement = 1, kAnyTable = 2 };

// The float32 bits of v.
inline uint32_t float_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// The decode kind of a 256-entry table (see Kind), checked for all 256 codes.
int table_kind(const float* table) {
  bool sym = true;
  for (int c = 0; c < 128; ++c) {
    sym = sym && (std::isnan(table[c]) ? std::isnan(table[c + 128])
                                       : float_bits(table[c + 128]) == (float_bits(table[c]) ^ 0x80000000u));
  }
  bool twos = float_bits(table[0]) == 0 && !std::isnan(table[128]) && std::signbit(table[128]);
  for (int c = 1; c < 128; ++c) {  // code c and code 256 - c (int8: -c): one magnitude, opposite signs
    const float v = table[c];
    twos = twos && !std::isnan(v) && !std::signbit(v) && float_bits(table[256 - c]) == (float_bits(v) ^ 0x80000000u);
  }
  return sym ? kSignMagnitude : (twos ? kTwosComplement : kAnyTable);
}

// Fills the byte tables and the decode kind of t from the 256 table values (exact in bfloat16).
// kTwosComplement: entry i < 128 holds magnitude i + 1 (entry 127: 128, from code 0x80).
void load_tables(const float* table, Tile* t) {
  alignas(64) uint8_t hi[256], lo[256];
  t->kind = table_kind(table);
  for (int i = 0; i < 256; ++i) {
    float v = table[i];
    if (t->kind == kTwosComplement && i < 128) v = i < 127 ? table[i + 1] : -table[128];
    uint16_t bits;
    bf16_bits(v, &bits);
    hi[i] = static_cast<uint8_t>(bits >> 8);
    lo[i] = static_cast<uint8_t>(bits);
  }
  for (int i = 0; i < 4; ++i) {
    t->hi[i] = _mm512_load_si512(hi + 64 * i);
    t->lo[i] = _mm512_load_si512(lo + 64 * i);
  }
}


// The byte tables in local registers (copied from the Tile once per tile call, so that the hot
// loop does not reload them): 64 codes -> two vectors of 32 bfloat16 values (w0: codes 16 L + t,
// w1: codes 16 L + 8 + t at word 8 L + t).
template <int Kind>
struct Decoder {
  __m512i hi0, hi1, hi2, hi3, lo0, lo1, lo2, lo3;
  explicit Decoder(const Tile& t)
      : hi0(t.hi[0]), hi1(t.hi[1]), hi2(t.hi[2]), hi3(t.hi[3]), lo0(t.lo[0]), lo1(t.lo[1]), lo2(t.lo[2]), lo3(t.lo[3]) {}
  GQ_K8_INLINE inline void operator()(__m512i c, __m512i* w0, __m512i* w1) const {
    __m512i hi, lo;
    const __m512i sign = _mm512_set1_epi8(char(0x80));
    if constexpr (Kind == kSignMagnitude) {
      // hi = perm ^ (c & 0x80): ternary logic A ^ (B & C) with A = perm, B = c, C = 0x80 bytes
      hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, c, hi1), c, sign, 0x78);
      lo = _mm512_permutex2var_epi8(lo0, c, lo1);
    } else if constexpr (Kind == kTwosComplement) {
      const __mmask64 nonzero = _mm512_test_epi8_mask(c, c);
      const __m512i idx = _mm512_add_epi8(_mm512_abs_epi8(c), _mm512_set1_epi8(-1));  // |int8(c)| - 1, 7 bits read
      hi = _mm512_ternarylogic_epi32(_mm512_maskz_permutex2var_epi8(nonzero, hi0, idx, hi1), c, sign, 0x78);
      lo = _mm512_maskz_permutex2var_epi8(nonzero, lo0, idx, lo1);
    } else {
      const __mmask64 top = _mm512_movepi8_mask(c);
      hi = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(hi0, c, hi1), _mm512_permutex2var_epi8(hi2, c, hi3));
      lo = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(lo0, c, lo1), _mm512_permutex2var_epi8(lo2, c, lo3));
    }
    *w0 = _mm512_unpacklo_epi8(lo, hi);
    *w1 = _mm512_unpackhi_epi8(lo, hi);
  }
};

// Calls step(r, acc) for r in [r0, r1), acc alternating between a and b (two accumulator chains
// with compile-time names, so they stay in registers).
template <class Step, class Acc>
GQ_K8_INLINE inline void alternate_runs(int64_t r0, int64_t r1, Acc& a, Acc& b, const Step& step) {
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) {
    step(r, a);
    step(r + 1, b);
  }
  if (r < r1) step(r, a);
}

// Per-lane block scales of a run whose first block is sbuf[first]: broadcasts (and a blend) where
// one or two blocks cover the run, a permute for four.
inline __m512 run_scales(const Tile& t, const float* sbuf, int32_t first) {
  if (t.lane_blocks == 1) return _mm512_set1_ps(sbuf[first]);
  if (t.lane_blocks == 2) return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(sbuf[first]), _mm512_set1_ps(sbuf[first + 1]));
  return _mm512_permutexvar_ps(t.lane_block, _mm512_loadu_ps(sbuf + first));
}

// 16 E8M0 scale bytes (as 32-bit lanes) -> 2^(b - 127) (b = 0: the subnormal 2^-127), 0xFF -> NaN.
inline __m512 scales_e8m0(__m512i b) {
  const __m512i bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                                               _mm512_slli_epi32(b, 23), _mm512_set1_epi32(0x00400000));
  return _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xFF)), _mm512_castsi512_ps(bits),
                              _mm512_set1_ps(NAN));
}

// Whether scales_e8m0 gives the scale table's bits for all 256 bytes (NaN for NaN).
bool is_e8m0_table(const float* table) {
  for (int b0 = 0; b0 < 256; b0 += 16) {
    alignas(64) float got[16];
    _mm512_store_ps(got, scales_e8m0(_mm512_add_epi32(_mm512_set1_epi32(b0),
                                                      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))));
    for (int i = 0; i < 16; ++i) {
      uint32_t g, w;
      std::memcpy(&g, got + i, 4);
      std::memcpy(&w, table + b0 + i, 4);
      if (std::isnan(table[b0 + i]) ? !std::isnan(got[i]) : g != w) return false;
    }
  }
  return true;
}

// first[i] = the first block of run r0 + i, counted from block b0 (no division per run).
inline void run_first_blocks(int64_t block_size, int64_t r0, int64_t r1, int64_t b0, int32_t* first) {
  for (int64_t r = r0; r < r1; ++r) first[r - r0] = static_cast<int32_t>(r * 64 / block_size - b0);
}

// Scales of blocks [b0, b1) of row n into sbuf (E8M0: 16 at a time). No software prefetch of the
// weight rows: they are read in address order, and prefetching rows ahead measured slower here.
inline void row_scales(const Tile& t, int64_t n, int64_t b0, int64_t b1, float* sbuf) {
  const PackedGemmJob& job = *t.job;
  const uint8_t* sc = job.scale + n * job.p.num_blocks;
  int64_t b = b0;
  if (t.e8m0) {
    for (; b + 16 <= b1; b += 16) {
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + b)));
      _mm512_storeu_ps(sbuf + (b - b0), scales_e8m0(idx));
    }
  }
  for (; b < b1; ++b) sbuf[b - b0] = job.scale_table[sc[b]];
}

// ---- float32 input ------------------------------------------------------------------------------

// part[(n - n0) * MR + m] += dot products of runs [r0, r1) for input rows m0 .. m0 + MR, weight
// rows [n0, n1); float32 input.
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
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = t.job->data + n * t.rb + r0 * 64;
    row_scales(t, n, b0, b1, sbuf);
    const float* xr = static_cast<const float*>(t.x) + m0 * t.kp + r0 * 64;
    float* out = part + (n - n0) * MR;
    Acc a, b;
    for (int m = 0; m < MR; ++m) a.v[m] = b.v[m] = _mm512_setzero_ps();
    alternate_runs(r0, r1, a, b, [&](int64_t r, Acc& acc) GQ_K8_INLINE {
      __m512i w0, w1;
      dec(_mm512_loadu_si512(row + (r - r0) * 64), &w0, &w1);
      __m512 v[4] = {_mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), _mm512_castsi512_ps(_mm512_and_si512(w0, high)),
                     _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), _mm512_castsi512_ps(_mm512_and_si512(w1, high))};
      const __m512 s = run_scales(t, sbuf, first[r - r0]);
      const float* xq = xr + (r - r0) * 64;
      if constexpr (MR == 1) {  // one input row: scale the lane sums
        __m512 d = _mm512_mul_ps(v[0], _mm512_loadu_ps(xq));
        d = _mm512_fmadd_ps(v[1], _mm512_loadu_ps(xq + 16), d);
        d = _mm512_fmadd_ps(v[2], _mm512_loadu_ps(xq + 32), d);
        d = _mm512_fmadd_ps(v[3], _mm512_loadu_ps(xq + 48), d);
        acc.v[0] = _mm512_fmadd_ps(d, s, acc.v[0]);
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

// The same for scaled bfloat16 input rows (vdpbf16ps), lane sums unscaled then times the block scale.
template <int MR, int Kind>
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
  for (int64_t n = n0; n < n1; ++n) {
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
        acc.v[m] = _mm512_fmadd_ps(_mm512_mul_ps(d, u[m]), s, acc.v[m]);
      }
    });
    for (int m = 0; m < MR; ++m) out[m] += _mm512_reduce_add_ps(_mm512_add_ps(a.v[m], b.v[m]));
  }
}

// ---- driver -------------------------------------------------------------------------------------

// Rows m0 .. m0 + MR of the output for weight rows [n0, n1), K in chunks whose input rows fit L1.
template <int MR, bool Bf16, int Kind>
void rows_all_chunks(const Tile& t, int64_t m0, int64_t n0, int64_t n1, float post, float* part) {
  const PackedGemmJob& job = *t.job;
  const int64_t run_input_bytes = 64 * (Bf16 ? 2 : 4);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(kMaxChunkRuns, kL1Bytes / MR / run_input_bytes));
  std::fill(part, part + (n1 - n0) * MR, 0.0f);
  for (int64_t r0 = 0; r0 < t.runs; r0 += chunk) {
    const int64_t r1 = std::min(t.runs, r0 + chunk);
    if constexpr (Bf16) {
      rows_tile_bf16<MR, Kind>(t, m0, n0, n1, r0, r1, part);
    } else {
      rows_tile_f32<MR, Kind>(t, m0, n0, n1, r0, r1, part);
    }
  }
  for (int64_t n = n0; n < n1; ++n) {
    const float b = job.bias != nullptr ? job.bias[n] : 0.0f;
    for (int m = 0; m < MR; ++m) job.out[(m0 + m) * job.p.out_features + n] = part[(n - n0) * MR + m] * post + b;
  }
}

template <bool Bf16, int Kind>
void run_tiles(const Tile& t) {
  const PackedGemmJob& job = *t.job;
  const PackedGemmParams& p = job.p;
  const float post = p.has_global_scale ? p.global_scale : 1.0f;  // a per-tensor second scale, on the row sums
  const int threads = kernel_threads(p.out_features * t.kp * job.rows);
  claim_chunks(p.out_features, kRowsPerPass, threads, [&](int64_t n0, int64_t n1) {
    float part[kRowsPerPass * kStreamTileRows];
    for_each_row_tile(job.rows, [&](auto tile_rows, int64_t m0) {
      rows_all_chunks<decltype(tile_rows)::value, Bf16, Kind>(t, m0, n0, n1, post, part);
    });
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
