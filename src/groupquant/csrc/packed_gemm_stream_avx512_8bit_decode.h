// The decode side of the AVX-512 streaming kernels for 8-bit codes
// (packed_gemm_stream_avx512_8bit.cpp, which describes the method): the job's Tile, the value table
// as vpermi2b byte tables and the Decoder of a run of 64 codes, the block scales of a row and of a
// run's lanes.
//
// AVX-512 code: include it after the file's `#pragma GCC target` (inside `#if defined(GQ_X86_DISPATCH)`),
// after <immintrin.h>, <algorithm>, <cmath>, <cstdint>, <cstring> and the packed_gemm headers, which
// the file includes before the pragma. Internal linkage (an unnamed namespace).
#pragma once

namespace groupquant {
namespace packed {
namespace {

// The hot loop's helpers and lambdas must inline (GCC otherwise calls the per-run step out of line).
#define GQ_K8_INLINE __attribute__((always_inline))

constexpr int64_t kMaxChunkRuns = 128;  // runs of 64 per K chunk (bounds the scale buffers)

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

// Scales of blocks [b0, b1) of row n into sbuf (E8M0: 16 at a time). (rows_tile_f32 / _bf16 read
// weight rows one at a time in address order, without software prefetch: prefetching rows ahead
// measured slower there; gemv_group_f32, which reads 4 rows at once, prefetches.)
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

}  // namespace
}  // namespace packed
}  // namespace groupquant
