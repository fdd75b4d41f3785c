// CPU entry points of the packed-weight GEMM (packed_gemm_cpu.cpp).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>

#include "cpu_utils.h"  // KeepDenormals, shared with the group ops
#include "packed_gemm.h"
#include "packed_gemm_workers.h"

namespace groupquant {
namespace packed {

// f(i0, i1) over [0, n) in chunks of `chunk`, handed out one at a time to torch's threads (dynamic
// scheduling), inside one at::parallel_for region; subnormals kept in every thread. Only for work
// that calls ATen ops (the many-rows path's at::mm runs sequentially inside the region); the
// kernels that do not take claim_chunks (packed_gemm_workers.h), which never waits for a thread
// that has not started.
template <class F>
void parallel_chunks(int64_t n, int64_t chunk, const F& f) {
  const int64_t tasks = (n + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), tasks));
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    KeepDenormals keep;
    for (int64_t t = next.fetch_add(1); t < tasks; t = next.fetch_add(1)) f(t * chunk, std::min(n, t * chunk + chunk));
  });
}

// The register-blocked kernel for few input rows, AVX2 path (packed_gemm_stream.cpp); false where it
// does not apply (not an x86 build, or a block size that is not a multiple of 32 or pairs of 16).
// Call only where the host has AVX2 (packed_gemm_cpu_path.h).
bool run_packed_stream_avx2(const PackedGemmJob& job);

// Whether the AVX-512 streaming kernel (packed_gemm_stream_avx512.cpp) takes this weight: 4-bit
// codes, block size 8, 16, 32 or 64 and padded K a multiple of 64 (where it is not one of 128, the
// 16-entry value_table's table[0] finite), or block size a multiple of 128 and padded K of 128.
bool stream512_applies(const PackedGemmParams& p, const float* value_table);

// The row stride, in elements, of those kernels' permuted input rows: padded K rounded up to 128.
int64_t stream512_row_floats(const PackedGemmParams& p);

// That kernel; scratch: job.rows * stream512_row_floats(p) floats (the input rows in its order).
// False where it does not apply or the build is not x86. Call only where the host has AVX-512 F/BW/VL/DQ.
bool run_packed_stream_avx512(const PackedGemmJob& job, float* scratch);

// Whether the AVX-512 BF16 kernel (packed_gemm_stream_avx512_bf16.cpp) takes this weight: where the
// AVX-512 kernel does, and the 16 table values are exact in bfloat16, multiples of 2^-8, at most 2^8.
bool stream512_bf16_applies(const PackedGemmParams& p, const float* value_table);

// That kernel, for a job whose x holds bfloat16 values (job.x_bf16); scratch: job.rows *
// stream512_row_floats(p) bfloat16 values, unscale: job.rows floats. False where it does not apply, where an input row's
// nonzero magnitudes span more than about 2^100 (the kernel's exactness rule), or the build is not
// x86. Call only where the host has AVX-512 F/BW/VL/DQ and BF16.
bool run_packed_stream_avx512_bf16(const PackedGemmJob& job, void* scratch, float* unscale);

// Whether the AVX-512 kernels for 8-bit codes (packed_gemm_stream_avx512_8bit.cpp) take this weight:
// 8-bit codes, padded K a multiple of 64, blocks of 16, 32, 64 or a multiple of 64, all 256 table
// values exact in bfloat16 (NaN allowed), and the host has AVX-512 VBMI. Call only on the AVX-512 path.
bool stream512_8bit_applies(const PackedGemmParams& p, const float* value_table);

// The same for the bfloat16-input kernel: also every finite table value a multiple of 2^-16, at most 2^16.
bool stream512_8bit_bf16_applies(const PackedGemmParams& p, const float* value_table);

// The float32-input kernel; scratch: job.rows * padded K floats (the input rows in its order).
// False where it does not apply or the build is not x86.
bool run_packed_stream_avx512_8bit(const PackedGemmJob& job, float* scratch);

// The bfloat16-input kernel (job.x holds bfloat16 values); scratch: job.rows * padded K bfloat16
// values, unscale: job.rows floats. False where it does not apply, where an input row's nonzero
// magnitudes span more than about 2^100, or the build is not x86. Call only on the avx512_bf16 path.
bool run_packed_stream_avx512_8bit_bf16(const PackedGemmJob& job, void* scratch, float* unscale);

// Whether that kernel wants its input rows permuted to the nibble decode order (within every 8
// columns: 0, 2, 4, 6, 1, 3, 5, 7).
bool nibble_order_input(const PackedGemmParams& p);

// out[M, N] = x @ W^T (+ bias), float32; x, out: the job's float32 tensors (x zero-padded to
// num_blocks * block_size columns).
void run_packed_linear_cpu(const PackedGemmJob& job, const at::Tensor& x, const at::Tensor& out);

// Which kernel ran this thread's last run_packed_linear_cpu call: many_rows, avx512_bf16, avx512,
// avx512_8bit_bf16, avx512_8bit, avx2, few_rows (none before any call). For tests.
const char* last_cpu_kernel();

// dst[N, num_blocks * block_size] = the decoded weight (padding columns included), float32.
void run_packed_decode_cpu(const PackedGemmJob& job, float* dst);

}  // namespace packed
}  // namespace groupquant
