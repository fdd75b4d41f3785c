// The bfloat16 input rows of the packed GEMM's vdpbf16ps kernels (packed_gemm_stream_avx512_bf16.cpp
// for 4-bit codes, packed_gemm_stream_avx512_8bit.cpp for 8-bit codes): the one rule that keeps
// vdpbf16ps exact, and the copy of the rows into a kernel's run order.
//
// vdpbf16ps treats subnormal inputs as zero and flushes subnormal results whatever MXCSR says, so
// a row m is scaled by a power of two 2^e_m: e_m = 0 where its nonzero finite magnitudes lie in
// [2^kBf16MinExp, 2^kBf16MaxUnscaledExp) already (the usual case), else the e_m (clamped to
// [-126, 126]) that brings its largest finite magnitude into [1, 2). A kernel takes a call only
// where every row's nonzero finite magnitudes are then at least 2^kBf16MinExp (bf16_row_exponent
// false: the float32 kernel runs); each kernel's header says why its products and sums are then
// exact and never subnormal. Multiplying by 2^e_m is exact, and so is the bfloat16 conversion of
// an input that was bfloat16.
//
// Plain C++ with no target options: include it before a file's `#pragma GCC target`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace groupquant {
namespace packed {

constexpr int kBf16MinExp = -100;          // scaled nonzero inputs are at least 2^-100
constexpr int kBf16MaxUnscaledExp = 64;    // rows in [2^-100, 2^64) are used as they are

// The power of two e row x[0 .. k) is scaled by (see the top); false where a nonzero finite
// magnitude would then fall below 2^kBf16MinExp.
inline bool bf16_row_exponent(const float* x, int64_t k, int* e) {
  float hi = 0.0f, lo = INFINITY;
  for (int64_t i = 0; i < k; ++i) {
    const float a = std::fabs(x[i]);
    if (!std::isfinite(a) || a == 0.0f) continue;
    hi = std::max(hi, a);
    lo = std::min(lo, a);
  }
  *e = 0;
  if (hi == 0.0f) return true;
  int top, bottom;
  std::frexp(hi, &top);     // hi in [2^(top-1), 2^top)
  std::frexp(lo, &bottom);  // lo >= 2^(bottom-1)
  if (top <= kBf16MaxUnscaledExp && bottom - 1 >= kBf16MinExp) return true;
  *e = std::min(126, std::max(-126, 1 - top));
  return bottom - 1 + *e >= kBf16MinExp;
}

// bfloat16 bits of x * mul (exact for a bfloat16 x and a power-of-two mul in range; NaN stays a quiet NaN).
inline uint16_t scaled_bf16(float x, float mul) {
  const float v = x * mul;
  if (std::isnan(v)) return 0x7FC0u;
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// The rows x[m * kp .. (m + 1) * kp), m < rows, scaled by 2^e_m as bfloat16 into dst in run order,
// at a row stride of kx (a multiple of Run, at least kp): within every run of Run values, position p
// holds element element_at(p) of the run, zero where that element is past the row; unscale[m] =
// 2^-e_m. False (dst partly written) where a row's range does not fit the rule.
template <int Run, class ElementAt>
bool prepare_bf16_rows(const float* x, int64_t rows, int64_t kp, uint16_t* dst, float* unscale, int64_t kx,
                       const ElementAt& element_at) {
  int at[Run];
  for (int p = 0; p < Run; ++p) at[p] = element_at(p);
  for (int64_t m = 0; m < rows; ++m) {
    const float* src = x + m * kp;
    int e = 0;
    if (!bf16_row_exponent(src, kp, &e)) return false;
    const float mul = std::ldexp(1.0f, e);
    unscale[m] = std::ldexp(1.0f, -e);
    uint16_t* out = dst + m * kx;
    for (int64_t r = 0; r < kx; r += Run)
      for (int p = 0; p < Run; ++p) out[r + p] = r + at[p] < kp ? scaled_bf16(src[r + at[p]], mul) : 0;
  }
  return true;
}

}  // namespace packed
}  // namespace groupquant
