// CPU utilities shared by the group ops (group_quant_cpu.cpp) and the packed GEMM
// (packed_gemm_cpu.h): one home, so both keep subnormals the same way.
#pragma once

#if defined(__SSE__) || defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define GQ_HAVE_MXCSR 1
#endif

namespace groupquant {

// Keeps subnormals for its lifetime: clears MXCSR's flush-to-zero (bit 15) and denormals-are-zero
// (bit 6; torch.set_flush_denormal(True) sets both) and restores the previous MXCSR on
// destruction, so results never depend on the thread's floating-point mode. A no-op where there
// is no MXCSR.
class KeepDenormals {
 public:
#if defined(GQ_HAVE_MXCSR)
  KeepDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~(kFlushToZero | kDenormalsAreZero)); }
  ~KeepDenormals() { _mm_setcsr(saved_); }
#else
  KeepDenormals() = default;
#endif
  KeepDenormals(const KeepDenormals&) = delete;
  KeepDenormals& operator=(const KeepDenormals&) = delete;

 private:
#if defined(GQ_HAVE_MXCSR)
  static constexpr unsigned kFlushToZero = 0x8000u;
  static constexpr unsigned kDenormalsAreZero = 0x0040u;
  unsigned saved_;
#endif
};

}  // namespace groupquant
