// Block scales and tables for the AVX-512 streaming kernels of the packed GEMM for 4-bit codes
// (packed_gemm_stream_avx512.cpp, packed_gemm_stream_avx512_bf16.cpp): scale bytes to float32, 16
// at a time; the per-lane block map of a run of 128; the 16 values' bfloat16 bits as a word table.
//
// AVX-512 code: include it after a file's `#pragma GCC target` (inside `#if defined(GQ_X86_DISPATCH)`),
// so that it is compiled with that file's target options, and after <immintrin.h>, <cmath>,
// <cstdint> and <cstring>, which the file includes before the pragma (so that no standard header
// takes the target options). Its functions have internal linkage (an unnamed namespace): one copy
// per including file, each with its file's options.
#pragma once

namespace groupquant {
namespace packed {
namespace {

// How 16 scale bytes become floats: arithmetically where the scale table is, for all 256 bytes,
// E8M0 (2^(b - 127), 0xFF NaN), E4M3 (NaN at magnitude 0x7F) or NVFP4's positive E4M3 (bytes
// from 0x80 NaN too) -- checked once per call against the table (scale_kind) -- else gathered.
enum class ScaleKind { kGather, kE8M0, kE4M3, kE4M3Positive };

// Lane j of a run of 128 codes (its codes 8j .. 8j + 7) -> its block counted from the run's first
// block: j * 8 / block_size (blocks of 8, 16, 32, 64 or a multiple of 128).
inline __m512i run_lane_blocks(int64_t block_size) {
  alignas(64) int32_t lanes[16];
  for (int j = 0; j < 16; ++j) lanes[j] = static_cast<int32_t>(j * 8 / block_size);
  return _mm512_load_si512(lanes);
}

// The bfloat16 bits (top halves of the float32 values) of the 16-entry value table, held twice: a
// word permute (vpermw) by a 4-bit code in the low bits of a word then ignores the word's bit 4.
inline __m512i bf16_word_table(const float* value_table) {
  alignas(64) uint16_t words[32];
  for (int c = 0; c < 32; ++c) {
    uint32_t bits;
    std::memcpy(&bits, value_table + (c & 15), 4);
    words[c] = static_cast<uint16_t>(bits >> 16);
  }
  return _mm512_load_si512(words);
}

inline __m512 scales_e8m0(__m512i b) {
  const __m512i bits = _mm512_slli_epi32(b, 23);
  __m512 v = _mm512_castsi512_ps(
      _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()), bits, _mm512_set1_epi32(0x00400000)));
  return _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xFF)), v, _mm512_set1_ps(NAN));
}

// E4M3 magnitudes 0 .. 0x7E (bytes without their sign bit) as floats: the byte's exponent and
// mantissa bits placed in float32's (mag << 20: 2^(e - 127) (1 + m / 8), or m 2^-129 for e = 0,
// a float32 subnormal) times 2^120: 2^(e - 7) (1 + m / 8), or m 2^-9, exactly. The subnormal
// operand needs subnormals kept (DAZ off): tasks keep them (KeepDenormals), and scale_kind, which
// checks all 256 bytes against the table, finds the mismatch and gathers where they are not.
inline __m512 e4m3_magnitudes(__m512i mag) {
  return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1p120f));
}

inline __m512 scales_e4m3(__m512i b, bool positive) {
  const __m512 nan = _mm512_set1_ps(NAN);
  if (positive) {  // NVFP4's: NaN from 0x7F up (0x7F and every byte with the sign bit)
    return _mm512_mask_blend_ps(_mm512_cmpge_epi32_mask(b, _mm512_set1_epi32(0x7F)), e4m3_magnitudes(b), nan);
  }
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7F));
  const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F));
  const __m512 v = _mm512_mask_blend_ps(is_nan, e4m3_magnitudes(mag), nan);
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

inline __m512 decode_scales(ScaleKind kind, const float* table, __m512i b) {
  switch (kind) {
    case ScaleKind::kE8M0: return scales_e8m0(b);
    case ScaleKind::kE4M3: return scales_e4m3(b, false);
    case ScaleKind::kE4M3Positive: return scales_e4m3(b, true);
    default: return _mm512_i32gather_ps(b, table, 4);
  }
}

// The arithmetic decoder that gives the table's value for every byte (NaN for NaN), else kGather.
ScaleKind scale_kind(const float* table) {
  constexpr ScaleKind kArithmetic[] = {ScaleKind::kE8M0, ScaleKind::kE4M3, ScaleKind::kE4M3Positive};
  for (ScaleKind kind : kArithmetic) {
    bool same = true;
    for (int b0 = 0; b0 < 256 && same; b0 += 16) {
      alignas(64) float got[16];
      const __m512i b = _mm512_add_epi32(_mm512_set1_epi32(b0), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                                                  11, 12, 13, 14, 15));
      _mm512_store_ps(got, decode_scales(kind, table, b));
      for (int i = 0; i < 16 && same; ++i) {
        const float want = table[b0 + i];
        uint32_t gw, ww;
        std::memcpy(&gw, got + i, 4);
        std::memcpy(&ww, &want, 4);
        same = std::isnan(want) ? std::isnan(got[i]) : gw == ww;
      }
    }
    if (same) return kind;
  }
  return ScaleKind::kGather;
}

// sbuf[0 .. count) = scale_table[sc[0 .. count)], 16 at a time (sbuf has room for a whole last
// vector; the scale bytes past count are not read).
inline void fill_scales(ScaleKind kind, const float* table, const uint8_t* sc, int64_t count, float* sbuf) {
  int64_t b = 0;
  for (; b + 16 <= count; b += 16) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + b)));
    _mm512_store_ps(sbuf + b, decode_scales(kind, table, idx));
  }
  for (; b < count; ++b) sbuf[b] = table[sc[b]];
}

}  // namespace
}  // namespace packed
}  // namespace groupquant
