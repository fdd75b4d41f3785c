// The skeleton every streaming kernel of the packed GEMM shares (packed_gemm_stream.cpp, AVX2;
// packed_gemm_stream_avx512.cpp, packed_gemm_stream_avx512_bf16.cpp, packed_gemm_stream_avx512_8bit.cpp):
//
//   stream_row_tasks   threads claim tasks of kStreamRowsPerPass weight rows (claim_chunks, with
//                      kernel_threads of the call); in each, every tile of input rows runs
//   for_each_row_tile  input rows in register tiles of up to kStreamTileRows, each tile's height a
//                      compile-time constant for the kernel, through
//   stream_chunks      the chunk loop: per-row partial sums zeroed, the kernel's chunk function over
//                      K in chunks (runs or blocks), then out = sum * global scale + bias.
//
// Plain C++ with no target options: include it before a file's `#pragma GCC target`. The kernel
// passes its tile and chunk functions as lambdas defined after the pragma; these loops only call
// them (once per task, tile and K chunk), so the hot loops inside are compiled, and inlined, with
// the kernel's own target options. The build has -ffp-contract=off: `sum * post + bias` is two
// roundings wherever it is compiled.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "packed_gemm.h"
#include "packed_gemm_workers.h"

namespace groupquant {
namespace packed {

constexpr int kStreamTileRows = 8;           // input rows per register tile, at most
constexpr int64_t kStreamRowsPerPass = 64;   // weight rows per task (one pass over the K chunks)

// For m0 = 0, 8, 16, ... < rows: tile(std::integral_constant<int, M>{}, m0) with
// M = min(kStreamTileRows, rows - m0).
template <class F>
void for_each_row_tile(int64_t rows, const F& tile) {
  static_assert(kStreamTileRows == 8, "the cases below cover tiles of 1 .. 8 rows");
  for (int64_t m0 = 0; m0 < rows; m0 += kStreamTileRows) {
    switch (std::min<int64_t>(kStreamTileRows, rows - m0)) {
      case 8: tile(std::integral_constant<int, 8>{}, m0); break;
      case 7: tile(std::integral_constant<int, 7>{}, m0); break;
      case 6: tile(std::integral_constant<int, 6>{}, m0); break;
      case 5: tile(std::integral_constant<int, 5>{}, m0); break;
      case 4: tile(std::integral_constant<int, 4>{}, m0); break;
      case 3: tile(std::integral_constant<int, 3>{}, m0); break;
      case 2: tile(std::integral_constant<int, 2>{}, m0); break;
      default: tile(std::integral_constant<int, 1>{}, m0); break;
    }
  }
}

// The job's weight rows in tasks of kStreamRowsPerPass claimed by kernel_threads(N * padded K *
// rows) threads; per task [n0, n1) and tile of input rows: tile(rows, m0, n0, n1, part), rows a
// std::integral_constant<int, MR>, part room for (n1 - n0) * MR partial sums.
template <class F>
void stream_row_tasks(const PackedGemmJob& job, const F& tile) {
  const PackedGemmParams& p = job.p;
  const int threads = kernel_threads(p.out_features * p.num_blocks * p.block_size * job.rows);
  claim_chunks(p.out_features, kStreamRowsPerPass, threads, [&](int64_t n0, int64_t n1) {
    float part[kStreamRowsPerPass * kStreamTileRows];
    for_each_row_tile(job.rows, [&](auto rows, int64_t m0) { tile(rows, m0, n0, n1, part); });
  });
}

// Output rows m0 .. m0 + MR for weight rows [n0, n1): part[(n - n0) * MR + m] zeroed, chunk(s0, s1)
// for [0, steps) in chunks of `chunk` steps (the kernel adds its products into part), then
// out[m0 + m, n] = part * (the global scale, NVFP4's second scale, else 1) + bias[n].
template <int MR, class Chunk>
void stream_chunks(const PackedGemmJob& job, int64_t m0, int64_t n0, int64_t n1, int64_t steps, int64_t chunk,
                   float* part, const Chunk& run_chunk) {
  std::fill(part, part + (n1 - n0) * MR, 0.0f);
  for (int64_t s0 = 0; s0 < steps; s0 += chunk) run_chunk(s0, std::min(steps, s0 + chunk));
  const float post = job.p.has_global_scale ? job.p.global_scale : 1.0f;
  for (int64_t n = n0; n < n1; ++n) {
    const float b = job.bias != nullptr ? job.bias[n] : 0.0f;
    for (int m = 0; m < MR; ++m) job.out[(m0 + m) * job.p.out_features + n] = part[(n - n0) * MR + m] * post + b;
  }
}

}  // namespace packed
}  // namespace groupquant
