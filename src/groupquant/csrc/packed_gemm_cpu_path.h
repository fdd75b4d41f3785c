// The instruction-set path of the packed-GEMM CPU kernels, chosen at run time from the host's
// CPU features (not the build's flags): AVX-512 with BF16 (avx512_bf16: the AVX-512 kernels, and the
// BF16 dot-product kernel for bfloat16 inputs), AVX-512 (F, BW, VL, DQ), AVX2 (+ FMA, F16C) or scalar
// (portable C++, what a non-x86 build runs). The AVX2 and AVX-512 kernels are compiled on every
// x86 build with GCC or Clang (function-level target options in their own translation units,
// packed_gemm_stream.cpp and packed_gemm_stream_avx512.cpp), so one build serves every x86 host.
//
// The active path starts as the best the host has; Python sets it once from GROUPQUANT_CPU_PATH
// (groupquant/ops/packed_gemm_cpu_path.py) through the op packed_set_cpu_path. Every path gives
// the decoded weight bit for bit (the reference decode); the linear outputs differ only in the
// float32 summation order (packed_gemm_stream*.cpp say which).
#pragma once

#include <cstdint>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define GQ_X86_DISPATCH 1
#endif

namespace groupquant {
namespace packed {

// kAvx512Bf16 is the AVX-512 path plus, for bfloat16 inputs, the AVX-512 BF16 kernel
// (packed_gemm_stream_avx512_bf16.cpp); everything else it runs as kAvx512.
enum class CpuPath : int32_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

// Whether path runs the AVX-512 kernels (avx512 or avx512_bf16).
inline bool is_avx512(CpuPath path) { return path == CpuPath::kAvx512 || path == CpuPath::kAvx512Bf16; }

// Whether path is compiled into this build and the host CPU (and OS) supports it.
bool cpu_path_available(CpuPath path);

// The path the kernels take now (the best available unless set otherwise).
CpuPath active_cpu_path();

// Sets the path; false (and nothing changes) where it is not available.
bool set_cpu_path(CpuPath path);

// "scalar", "avx2", "avx512", "avx512_bf16".
const char* cpu_path_name(CpuPath path);

}  // namespace packed
}  // namespace groupquant
