// Which CPU kernel of the packed GEMM runs a call: one written table (kKernelRules, in
// packed_gemm_select.cpp; the same table is in docs/packed-inference.md, "Kernel selection", and a
// test compares the two through the op packed_cpu_kernel_table). A call takes the first rule whose
// columns all hold:
//
//   rows   few (rows < tile_gemm_min_rows), many, or any
//   path   the least CPU path that runs the kernel (scalar < avx2 < avx512 < avx512_bf16)
//   input  bfloat16 only, or any input dtype
//   bits   the code width it takes (0: any)
//   fits   the weight's layout / table rule (a function of the params and the value table), or none
//
// A kernel chosen so runs the call, with one exception written in the table: the bfloat16-input
// kernels refuse an input row whose nonzero magnitudes span more than about 2^100 (their exactness
// rule, known only from the data), and then the rule's `refused` kernel runs it (its own rule is
// implied by the refusing kernel's fits). The last rule takes every call.
//
// This header is plain C++ (no ATen): the table's types, the rule walk and the kernel names.
#pragma once

#include <cstdint>

#include "packed_gemm.h"
#include "packed_gemm_cpu_path.h"

namespace groupquant {
namespace packed {

// The CPU kernels, by the names the library reports (op packed_cpu_last_kernel).
enum class CpuKernel : int32_t {
  kNone = 0,         // no kernel (a rule that never refuses)
  kManyRows,         // decode tiles of weight rows, at::mm against them (packed_gemm_cpu.cpp)
  kAvx512Bf16,       // 4-bit codes, bfloat16 input, vdpbf16ps (packed_gemm_stream_avx512_bf16.cpp)
  kAvx512_8bitBf16,  // 8-bit codes, bfloat16 input (packed_gemm_stream_avx512_8bit.cpp)
  kAvx512_8bit,      // 8-bit codes, float32 input (packed_gemm_stream_avx512_8bit.cpp)
  kAvx512,           // 4-bit codes, float32 input (packed_gemm_stream_avx512.cpp)
  kAvx2,             // register-blocked streaming, AVX2 (packed_gemm_stream.cpp)
  kFewRows,          // decode a chunk of two rows, micro-kernel (packed_gemm_cpu.cpp)
};

// "many_rows", "avx512_bf16", "avx512_8bit_bf16", "avx512_8bit", "avx512", "avx2", "few_rows", "none".
const char* cpu_kernel_name(CpuKernel k);

enum class RowsRule : int32_t { kAny = 0, kFew = 1, kMany = 2 };

// A weight rule of the fits column: whether the kernel takes these params and this value table.
using FitsFn = bool (*)(const PackedGemmParams& p, const float* value_table);

// One row of the selection table.
struct KernelRule {
  RowsRule rows;
  CpuPath path;          // the least path that runs it
  bool bf16_input;       // only for bfloat16 input
  int32_t code_bits;     // 0: any width
  FitsFn fits;           // nullptr: every weight
  const char* fits_name;  // fits in words (the function's name), for the table text
  CpuKernel kernel;
  CpuKernel refused;     // runs the call where `kernel` refuses its input (kNone: never refuses)
};

// The rule for a call: rows input rows, x_bf16 the input's dtype, on `path`.
const KernelRule& select_cpu_kernel(const PackedGemmParams& p, const float* value_table, CpuPath path, bool x_bf16,
                                    int64_t rows);

// The table as markdown rows, one line each: | rows | path | input | bits | fits | kernel | refused |.
const char* cpu_kernel_table_text();

// Whether the AVX2 streaming kernel (packed_gemm_stream.cpp) takes this weight: blocks of a multiple
// of 32, or of 16 in pairs that fill whole runs of 32.
bool stream_avx2_applies(const PackedGemmParams& p, const float* value_table);

}  // namespace packed
}  // namespace groupquant
