// CUDA kernel of the packed-weight GEMM (packed_gemm.h): one warp per output row n and tile of up
// to kRows input rows; the lanes walk the row's codes, decode each through the element table and
// its block's scale through the scale table (both in shared memory), multiply into every input row
// of the tile and reduce across the warp. Straightforward, not tuned: the weight is read once per
// tile of kRows input rows and never materialized.
#include <cuda_runtime.h>

#include <cstdint>

#include "packed_gemm.h"

namespace groupquant {
namespace packed {
namespace {

constexpr int kRows = 8;         // input rows per warp
constexpr int kWarps = 8;        // warps per block of threads

__global__ void packed_linear_kernel(PackedGemmJob job) {
  __shared__ float values[256];
  __shared__ float scales[256];
  const PackedGemmParams& p = job.p;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    values[i] = i < (1 << p.code_bits) ? job.value_table[i] : 0.0f;
    scales[i] = job.scale_table[i];
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kRows;
  if (n >= p.out_features) return;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), job.rows - m0));
  const int64_t ldx = p.num_blocks * p.block_size;
  const uint8_t* row = job.data + n * row_bytes(p);
  const uint8_t* row_scales = job.scale + n * p.num_blocks;
  float acc[kRows];
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
  for (int64_t j = lane; j < p.in_features; j += 32) {
    float w = values[code_at(row, j, p.code_bits)] * scales[row_scales[j / p.block_size]];
    if (p.has_global_scale) w = w * p.global_scale;
    for (int m = 0; m < rows; ++m) acc[m] = fmaf(w, job.x[(m0 + m) * ldx + j], acc[m]);
  }
  for (int m = 0; m < rows; ++m) {
    float v = acc[m];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) job.out[(m0 + m) * p.out_features + n] = v + (job.bias != nullptr ? job.bias[n] : 0.0f);
  }
}

__global__ void packed_decode_kernel(PackedGemmJob job, float* dst) {
  const PackedGemmParams& p = job.p;
  const int64_t ldx = p.num_blocks * p.block_size;
  const int64_t total = p.out_features * ldx;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / ldx, j = i % ldx;
    float w = job.value_table[code_at(job.data + n * row_bytes(p), j, p.code_bits)] *
              job.scale_table[job.scale[n * p.num_blocks + j / p.block_size]];
    if (p.has_global_scale) w = w * p.global_scale;
    dst[i] = w;
  }
}

}  // namespace

int run_packed_linear_cuda(const PackedGemmJob& job, cudaStream_t stream) {
  if (job.rows == 0 || job.p.out_features == 0) return 0;
  const dim3 grid(static_cast<unsigned>((job.p.out_features + kWarps - 1) / kWarps),
                  static_cast<unsigned>((job.rows + kRows - 1) / kRows));
  packed_linear_kernel<<<grid, kWarps * 32, 0, stream>>>(job);
  return static_cast<int>(cudaGetLastError());
}

int run_packed_decode_cuda(const PackedGemmJob& job, float* dst, cudaStream_t stream) {
  const int64_t total = job.p.out_features * job.p.num_blocks * job.p.block_size;
  if (total == 0) return 0;
  const int64_t blocks = (total + 255) / 256;
  packed_decode_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(job, dst);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace packed
}  // namespace groupquant
