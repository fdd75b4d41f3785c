// The selection table of the packed GEMM's CPU kernels (packed_gemm_select.h) and its walk.
#include "packed_gemm_select.h"

#include <string>

#include "packed_gemm_cpu.h"  // the kernels' fits rules (stream512_applies, ...)

namespace groupquant {
namespace packed {

namespace {

// Walked in order, first match wins. Implications the walk relies on (checked in the fits
// functions): stream512_bf16_applies implies stream512_applies, stream512_8bit_bf16_applies implies
// stream512_8bit_applies, so a refused call's kernel always takes it.
constexpr KernelRule kKernelRules[] = {
    {RowsRule::kMany, CpuPath::kScalar, false, 0, nullptr, "", CpuKernel::kManyRows, CpuKernel::kNone},
    {RowsRule::kFew, CpuPath::kAvx512Bf16, true, 4, stream512_bf16_applies, "stream512_bf16_applies",
     CpuKernel::kAvx512Bf16, CpuKernel::kAvx512},
    {RowsRule::kFew, CpuPath::kAvx512Bf16, true, 8, stream512_8bit_bf16_applies, "stream512_8bit_bf16_applies",
     CpuKernel::kAvx512_8bitBf16, CpuKernel::kAvx512_8bit},
    {RowsRule::kFew, CpuPath::kAvx512, false, 8, stream512_8bit_applies, "stream512_8bit_applies",
     CpuKernel::kAvx512_8bit, CpuKernel::kNone},
    {RowsRule::kFew, CpuPath::kAvx512, false, 4, stream512_applies, "stream512_applies", CpuKernel::kAvx512,
     CpuKernel::kNone},
    {RowsRule::kFew, CpuPath::kAvx2, false, 0, stream_avx2_applies, "stream_avx2_applies", CpuKernel::kAvx2,
     CpuKernel::kNone},
    {RowsRule::kAny, CpuPath::kScalar, false, 0, nullptr, "", CpuKernel::kFewRows, CpuKernel::kNone},
};

bool rows_match(RowsRule rule, const PackedGemmParams& p, int64_t rows) {
  switch (rule) {
    case RowsRule::kFew: return rows < p.tile_gemm_min_rows;
    case RowsRule::kMany: return rows >= p.tile_gemm_min_rows;
    default: return true;
  }
}

}  // namespace

const char* cpu_kernel_name(CpuKernel k) {
  switch (k) {
    case CpuKernel::kManyRows: return "many_rows";
    case CpuKernel::kAvx512Bf16: return "avx512_bf16";
    case CpuKernel::kAvx512_8bitBf16: return "avx512_8bit_bf16";
    case CpuKernel::kAvx512_8bit: return "avx512_8bit";
    case CpuKernel::kAvx512: return "avx512";
    case CpuKernel::kAvx2: return "avx2";
    case CpuKernel::kFewRows: return "few_rows";
    default: return "none";
  }
}

bool stream_avx2_applies(const PackedGemmParams& p, const float*) {
  return p.block_size % 32 == 0 || (p.block_size == 16 && p.num_blocks % 2 == 0);
}

const KernelRule& select_cpu_kernel(const PackedGemmParams& p, const float* value_table, CpuPath path, bool x_bf16,
                                    int64_t rows) {
  for (const KernelRule& r : kKernelRules) {
    if (!rows_match(r.rows, p, rows) || static_cast<int32_t>(path) < static_cast<int32_t>(r.path)) continue;
    if ((r.bf16_input && !x_bf16) || (r.code_bits != 0 && r.code_bits != p.code_bits)) continue;
    if (r.fits == nullptr || r.fits(p, value_table)) return r;
  }
  return kKernelRules[sizeof kKernelRules / sizeof kKernelRules[0] - 1];  // not reached: the last rule takes all
}

const char* cpu_kernel_table_text() {
  static const std::string text = [] {
    std::string t;
    for (const KernelRule& r : kKernelRules) {
      const char* rows = r.rows == RowsRule::kFew ? "few" : r.rows == RowsRule::kMany ? "many" : "any";
      t += std::string("| ") + rows + " | " + cpu_path_name(r.path) + " | " + (r.bf16_input ? "bfloat16" : "any") +
           " | " + (r.code_bits == 0 ? std::string("any") : std::to_string(r.code_bits)) + " | " +
           (r.fits == nullptr ? std::string("-") : "`" + std::string(r.fits_name) + "`") + " | `" +
           cpu_kernel_name(r.kernel) + "` | " +
           (r.refused == CpuKernel::kNone ? std::string("-") : "`" + std::string(cpu_kernel_name(r.refused)) + "`") +
           " |\n";
    }
    return t;
  }();
  return text.c_str();
}

}  // namespace packed
}  // namespace groupquant
