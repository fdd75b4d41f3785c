// Host feature checks and the active path of packed_gemm_cpu_path.h.
#include "packed_gemm_cpu_path.h"

#include <atomic>
#include <initializer_list>

namespace groupquant {
namespace packed {
namespace {

// The best available path, from the host's CPUID (and XCR0: libgcc's checks include OS support).
CpuPath best_path() {
  for (CpuPath p : {CpuPath::kAvx512Bf16, CpuPath::kAvx512, CpuPath::kAvx2}) {
    if (cpu_path_available(p)) return p;
  }
  return CpuPath::kScalar;
}

std::atomic<int32_t>& active() {
  static std::atomic<int32_t> path{static_cast<int32_t>(best_path())};
  return path;
}

}  // namespace

bool cpu_path_available(CpuPath path) {
  switch (path) {
    case CpuPath::kScalar:
      return true;
#if defined(GQ_X86_DISPATCH)
    case CpuPath::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuPath::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuPath::kAvx512Bf16:
      return cpu_path_available(CpuPath::kAvx512) && __builtin_cpu_supports("avx512bf16");
#endif
    default:
      return false;
  }
}

CpuPath active_cpu_path() { return static_cast<CpuPath>(active().load(std::memory_order_relaxed)); }

bool set_cpu_path(CpuPath path) {
  if (!cpu_path_available(path)) return false;
  active().store(static_cast<int32_t>(path), std::memory_order_relaxed);
  return true;
}

const char* cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::kAvx512Bf16: return "avx512_bf16";
    case CpuPath::kAvx512: return "avx512";
    case CpuPath::kAvx2: return "avx2";
    default: return "scalar";
  }
}

}  // namespace packed
}  // namespace groupquant
