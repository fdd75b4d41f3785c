// CPU kernels of the packed-weight GEMM (packed_gemm.h): codes are decoded with their block scale
// into a small float tile (L1-sized: two weight rows times one K chunk), and the tile is used at
// once against every input row; the weight is streamed from memory once per call.
//
// Which kernel runs a call is the selection table's choice (packed_gemm_select.h: rows, path, input
// dtype, code bits and the weight's fits rule -> kernel); run_kernel below runs it. The two kernels
// of this file:
// - few_rows (few input rows, where no streaming kernel takes the weight, and the scalar path): per
//   pair of output rows and K chunk, decode two rows into an L1 buffer, then a micro-kernel (2
//   weight rows x up to 4 input rows) adds into per-row partial sums.
// - many_rows: each thread decodes a tile of weight rows at a time (at most kTileBytes of float32,
//   never the whole weight) and a float GEMM (at::mm) multiplies the inputs by it.
//
// The path (packed_gemm_cpu_path.h) is read once per call. Vector decoders (AVX2 in the build's
// flags; AVX-512 builds also define __AVX2__; used on the AVX2 and AVX-512 paths): a 4-bit
// code selects its value from the 16-entry table pre-multiplied by the block scale in two
// registers; 8-bit codes are widened and converted arithmetically where Python proved it equal to
// the table (int8, half-precision bit shift), else gathered from the 256-entry table. Other widths
// (FP6), builds without AVX2 and the scalar path decode one code at a time from the table.
//
// Work is shared by claim_chunks (packed_gemm_workers.h; the many-rows path, which calls at::mm,
// by parallel_chunks): chunks of rows claimed dynamically.
// Subnormal scales and products are kept: each thread clears flush-to-zero and
// denormals-are-zero while it runs (the fake-quant dequantization keeps them too).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GQP_AVX2 1
#endif

#include "packed_gemm.h"
#include "packed_gemm_cpu.h"
#include "packed_gemm_cpu_path.h"
#include "packed_gemm_select.h"
#include "packed_gemm_workers.h"

namespace groupquant {
namespace packed {
namespace {

constexpr int64_t kChunk = 512;                // K elements decoded per step (2 rows: 4 KiB)
constexpr int64_t kTileBytes = int64_t(1) << 20;  // float32 weight tile of the many-rows path (per thread)
constexpr int kMaxTileRows = 4;                // input rows per micro-kernel call

// ---- decoding one block -------------------------------------------------------------------------

// Elements [j0, j0 + count) of `row` (j0 a block start, count = block_size), times the block's
// scale s (and the global scale), into dst. Scalar: one table lookup per code.
void decode_block_scalar(const PackedGemmParams& p, const float* table, const uint8_t* row, int64_t j0,
                         int64_t count, float s, float* dst) {
  for (int64_t j = 0; j < count; ++j) {
    float v = table[code_at(row, j0 + j, p.code_bits)] * s;
    if (p.has_global_scale) v = v * p.global_scale;
    dst[j] = v;
  }
}

#if defined(GQP_AVX2)
// 4-bit codes through the 16-entry table pre-multiplied by the block scale (held in two vectors).
void decode_block_table16(const PackedGemmParams& p, const float* table, const uint8_t* row, int64_t j0,
                          int64_t count, float s, float* dst) {
  __m256 sv = _mm256_set1_ps(s);
  __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(table), sv);
  __m256 hi = _mm256_mul_ps(_mm256_loadu_ps(table + 8), sv);
  if (p.has_global_scale) {
    const __m256 g = _mm256_set1_ps(p.global_scale);
    lo = _mm256_mul_ps(lo, g);
    hi = _mm256_mul_ps(hi, g);
  }
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const uint8_t* src = row + j0 / 2;
  for (int64_t j = 0; j < count; j += 8) {
    uint32_t word;
    std::memcpy(&word, src + j / 2, 4);
    const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts);
    const __m256 vlo = _mm256_permutevar8x32_ps(lo, idx);
    const __m256 vhi = _mm256_permutevar8x32_ps(hi, idx);
    const __m256 top = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28));  // bit 3 of the code -> sign
    _mm256_storeu_ps(dst + j, _mm256_blendv_ps(vlo, vhi, top));
  }
}

// Eight element values (before the block scale) of 8-bit codes at src.
inline __m256 eight_bit_values(const PackedGemmParams& p, const float* table, const uint8_t* src) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
  switch (p.decode_path) {
    case kDecodeInt8:
      return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), _mm256_set1_ps(p.elem_mul));
    case kDecodeHalf: {
      const __m128i c = _mm_cvtepu8_epi16(bytes);
      const __m128i low7 = _mm_and_si128(c, _mm_set1_epi16(0x7F));
      const __m128i sign = _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x80)), 8);
      const __m128i half = _mm_or_si128(sign, _mm_sll_epi16(low7, _mm_cvtsi32_si128(p.half_shift)));
      __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(half), _mm256_set1_ps(p.elem_mul));
      if (p.nan_low7 >= 0) {
        const __m128i is_nan = _mm_cmpeq_epi16(low7, _mm_set1_epi16(static_cast<int16_t>(p.nan_low7)));
        const __m256 mask = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(is_nan));
        v = _mm256_blendv_ps(v, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), mask);
      }
      return v;
    }
    default:
      return _mm256_i32gather_ps(table, _mm256_cvtepu8_epi32(bytes), 4);
  }
}

// 8-bit codes: values (arithmetic or gathered) times the block scale (and the global scale).
void decode_block_byte(const PackedGemmParams& p, const float* table, const uint8_t* row, int64_t j0,
                       int64_t count, float s, float* dst) {
  const __m256 sv = _mm256_set1_ps(s);
  const __m256 g = _mm256_set1_ps(p.global_scale);
  for (int64_t j = 0; j < count; j += 8) {
    __m256 v = _mm256_mul_ps(eight_bit_values(p, table, row + j0 + j), sv);
    if (p.has_global_scale) v = _mm256_mul_ps(v, g);
    _mm256_storeu_ps(dst + j, v);
  }
}
#endif

using BlockDecoder = void (*)(const PackedGemmParams&, const float*, const uint8_t*, int64_t, int64_t, float, float*);

// The decoder for the job's codes on `path` (vector decoders need whole vectors per block).
BlockDecoder pick_decoder(const PackedGemmParams& p, CpuPath path) {
#if defined(GQP_AVX2)
  if (path != CpuPath::kScalar && p.block_size % 8 == 0) {
    if (p.code_bits == 4 && (p.decode_path == kDecodeTable16 || p.decode_path == kDecodeNibbleBf16))
      return decode_block_table16;
    if (p.code_bits == 8) return decode_block_byte;
  }
#else
  (void)path;
#endif
  return decode_block_scalar;
}

// Decodes elements [k0, k1) (block-aligned) of weight row n into dst.
void decode_span(const PackedGemmJob& job, BlockDecoder decode, int64_t n, int64_t k0, int64_t k1, float* dst) {
  const PackedGemmParams& p = job.p;
  const uint8_t* row = job.data + n * row_bytes(p);
  const uint8_t* scales = job.scale + n * p.num_blocks;
  const int64_t b1 = k1 / p.block_size;  // no division per block (k0, k1 are block-aligned)
  for (int64_t b = k0 / p.block_size, j = k0; b < b1; ++b, j += p.block_size) {
    decode(p, job.value_table, row, j, p.block_size, job.scale_table[scales[b]], dst + (j - k0));
  }
}

// ---- few input rows: decode a chunk of two rows, FMA against every input row --------------------

// part[m * 2 + r] += dot(w_r[0:len], x_m[0:len]) for MR input rows (x rows at x + m * ldx); Vec:
// AVX2 vectors (else one product at a time: the scalar path).
template <int MR, bool Vec>
void micro_kernel(const float* w0, const float* w1, const float* x, int64_t ldx, int64_t len, float* part) {
  int64_t i = 0;
#if defined(GQP_AVX2)
  if constexpr (Vec) {
  __m256 acc0[MR], acc1[MR];
  for (int m = 0; m < MR; ++m) acc0[m] = acc1[m] = _mm256_setzero_ps();
  if (MR <= 2) {  // two accumulators per pair: hide the FMA latency
    __m256 acc2[MR], acc3[MR];
    for (int m = 0; m < MR; ++m) acc2[m] = acc3[m] = _mm256_setzero_ps();
    for (; i + 16 <= len; i += 16) {
      const __m256 a0 = _mm256_loadu_ps(w0 + i), b0 = _mm256_loadu_ps(w0 + i + 8);
      const __m256 a1 = _mm256_loadu_ps(w1 + i), b1 = _mm256_loadu_ps(w1 + i + 8);
      for (int m = 0; m < MR; ++m) {
        const __m256 xa = _mm256_loadu_ps(x + m * ldx + i), xb = _mm256_loadu_ps(x + m * ldx + i + 8);
        acc0[m] = _mm256_fmadd_ps(a0, xa, acc0[m]);
        acc1[m] = _mm256_fmadd_ps(a1, xa, acc1[m]);
        acc2[m] = _mm256_fmadd_ps(b0, xb, acc2[m]);
        acc3[m] = _mm256_fmadd_ps(b1, xb, acc3[m]);
      }
    }
    for (int m = 0; m < MR; ++m) {
      acc0[m] = _mm256_add_ps(acc0[m], acc2[m]);
      acc1[m] = _mm256_add_ps(acc1[m], acc3[m]);
    }
  }
  for (; i + 8 <= len; i += 8) {
    const __m256 a0 = _mm256_loadu_ps(w0 + i), a1 = _mm256_loadu_ps(w1 + i);
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_loadu_ps(x + m * ldx + i);
      acc0[m] = _mm256_fmadd_ps(a0, xv, acc0[m]);
      acc1[m] = _mm256_fmadd_ps(a1, xv, acc1[m]);
    }
  }
  for (int m = 0; m < MR; ++m) {
    alignas(32) float t0[8], t1[8];
    _mm256_store_ps(t0, acc0[m]);
    _mm256_store_ps(t1, acc1[m]);
    float s0 = 0.0f, s1 = 0.0f;
    for (int l = 0; l < 8; ++l) {
      s0 += t0[l];
      s1 += t1[l];
    }
    part[m * 2] += s0;
    part[m * 2 + 1] += s1;
  }
  }
#endif
  for (; i < len; ++i) {
    for (int m = 0; m < MR; ++m) {
      part[m * 2] += w0[i] * x[m * ldx + i];
      part[m * 2 + 1] += w1[i] * x[m * ldx + i];
    }
  }
}

// part[m * 2 + r] += dot(w_r, x_m) for all job.rows input rows, MR at a time.
template <bool Vec>
void chunk_all_rows(const PackedGemmJob& job, const float* w0, const float* w1, int64_t k0, int64_t len, float* part) {
  const int64_t ldx = job.p.num_blocks * job.p.block_size;
  int64_t m = 0;
  for (; m + kMaxTileRows <= job.rows; m += kMaxTileRows)
    micro_kernel<kMaxTileRows, Vec>(w0, w1, job.x + m * ldx + k0, ldx, len, part + m * 2);
  const float* x = job.x + m * ldx + k0;
  switch (job.rows - m) {
    case 3: micro_kernel<3, Vec>(w0, w1, x, ldx, len, part + m * 2); break;
    case 2: micro_kernel<2, Vec>(w0, w1, x, ldx, len, part + m * 2); break;
    case 1: micro_kernel<1, Vec>(w0, w1, x, ldx, len, part + m * 2); break;
    default: break;
  }
}

void run_few_rows(const PackedGemmJob& job, CpuPath path) {
  const PackedGemmParams& p = job.p;
  const int64_t kp = p.num_blocks * p.block_size;
  const int64_t chunk = std::max<int64_t>(p.block_size, (kChunk / p.block_size) * p.block_size);
  const BlockDecoder decode = pick_decoder(p, path);
  const bool vec = path != CpuPath::kScalar;
  const int64_t pairs = (p.out_features + 1) / 2;
  claim_chunks(pairs, 32, kernel_threads(p.out_features * kp * job.rows), [&](int64_t q0, int64_t q1) {
    std::vector<float> wbuf(2 * chunk);
    std::vector<float> part(job.rows * 2);
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t n0 = 2 * q;
      const int64_t n1 = std::min(n0 + 1, p.out_features - 1);  // an odd last row is done twice
      std::fill(part.begin(), part.end(), 0.0f);
      for (int64_t k0 = 0; k0 < kp; k0 += chunk) {
        const int64_t k1 = std::min(kp, k0 + chunk);
        decode_span(job, decode, n0, k0, k1, wbuf.data());
        decode_span(job, decode, n1, k0, k1, wbuf.data() + chunk);
        if (vec) {
          chunk_all_rows<true>(job, wbuf.data(), wbuf.data() + chunk, k0, k1 - k0, part.data());
        } else {
          chunk_all_rows<false>(job, wbuf.data(), wbuf.data() + chunk, k0, k1 - k0, part.data());
        }
      }
      for (int64_t m = 0; m < job.rows; ++m) {
        for (int64_t r = 0; r < 2 && n0 + r < p.out_features; ++r) {
          const float b = job.bias != nullptr ? job.bias[n0 + r] : 0.0f;
          job.out[m * p.out_features + n0 + r] = part[m * 2 + r] + b;
        }
      }
    }
  });
}

// ---- many input rows: decode a tile of weight rows, float GEMM against it ----------------------

void run_many_rows(const PackedGemmJob& job, const at::Tensor& x, const at::Tensor& out, CpuPath path) {
  const PackedGemmParams& p = job.p;
  const int64_t kp = p.num_blocks * p.block_size;
  const int64_t tile = std::max<int64_t>(8, std::min<int64_t>(p.out_features, kTileBytes / (4 * kp)));
  const BlockDecoder decode = pick_decoder(p, path);
  // One parallel region: each thread decodes a tile of weight rows into its own buffer and runs a
  // (sequential, being inside the region) float GEMM on it; no alternation between this region and
  // a multithreaded GEMM, which stalls badly when the cores are shared with other processes.
  parallel_chunks(p.out_features, tile, [&](int64_t n0, int64_t n1) {
    at::Tensor buf = at::empty({n1 - n0, kp}, x.options());
    float* dst = buf.data_ptr<float>();
    for (int64_t n = n0; n < n1; ++n) decode_span(job, decode, n, 0, kp, dst + (n - n0) * kp);
    out.narrow(1, n0, n1 - n0).copy_(at::mm(x, buf.t()));
  });
  if (job.bias != nullptr) {
    out.add_(at::from_blob(const_cast<float*>(job.bias), {p.out_features}, x.options()));
  }
}

// Runs kernel k on the call (the one the selection table chose, packed_gemm_select.h); false where
// it refuses the call's input (the bfloat16-input kernels' range rule), with nothing written.
bool run_kernel(CpuKernel k, const PackedGemmJob& job, const at::Tensor& x, const at::Tensor& out, CpuPath path) {
  switch (k) {
    case CpuKernel::kManyRows:
      run_many_rows(job, x, out, path);
      return true;
    case CpuKernel::kAvx512Bf16: {
      const at::Tensor rows16 =  // the rows in its order, padded to runs of 128
          at::empty({job.rows, stream512_row_floats(job.p)}, x.options().dtype(at::kBFloat16));
      const at::Tensor unscale = at::empty({job.rows}, x.options());
      return run_packed_stream_avx512_bf16(job, rows16.data_ptr(), unscale.data_ptr<float>());
    }
    case CpuKernel::kAvx512_8bitBf16: {
      const at::Tensor rows16 = at::empty_like(x, x.options().dtype(at::kBFloat16));
      const at::Tensor unscale = at::empty({job.rows}, x.options());
      return run_packed_stream_avx512_8bit_bf16(job, rows16.data_ptr(), unscale.data_ptr<float>());
    }
    case CpuKernel::kAvx512_8bit: {
      const at::Tensor scratch = at::empty_like(x);
      return run_packed_stream_avx512_8bit(job, scratch.data_ptr<float>());
    }
    case CpuKernel::kAvx512: {
      const at::Tensor scratch = at::empty({job.rows, stream512_row_floats(job.p)}, x.options());
      return run_packed_stream_avx512(job, scratch.data_ptr<float>());
    }
    case CpuKernel::kAvx2: {
      if (!nibble_order_input(job.p)) return run_packed_stream_avx2(job);
      const int64_t kp = job.p.num_blocks * job.p.block_size;
      const at::Tensor order = at::tensor(std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7});
      const at::Tensor xs = x.view({job.rows, kp / 8, 8}).index_select(2, order).contiguous();
      PackedGemmJob permuted = job;
      permuted.x = xs.data_ptr<float>();
      return run_packed_stream_avx2(permuted);
    }
    default:
      run_few_rows(job, path);
      return true;
  }
}

thread_local const char* last_kernel = "none";  // the kernel of this thread's last call (last_cpu_kernel)

}  // namespace

const char* last_cpu_kernel() { return last_kernel; }

void run_packed_linear_cpu(const PackedGemmJob& job, const at::Tensor& x, const at::Tensor& out) {
  if (job.rows == 0 || job.p.out_features == 0) return;
  const CpuPath path = active_cpu_path();
  const KernelRule& rule = select_cpu_kernel(job.p, job.value_table, path, job.x_bf16, job.rows);
  CpuKernel ran = rule.kernel;
  if (!run_kernel(ran, job, x, out, path)) {
    ran = rule.refused;  // the table's kernel for an input this one refuses (it takes every input)
    if (ran == CpuKernel::kNone || !run_kernel(ran, job, x, out, path)) {
      ran = CpuKernel::kFewRows;  // not reached while the table's implications hold
      run_few_rows(job, path);
    }
  }
  last_kernel = cpu_kernel_name(ran);
}

void run_packed_decode_cpu(const PackedGemmJob& job, float* dst) {
  const PackedGemmParams& p = job.p;
  const int64_t kp = p.num_blocks * p.block_size;
  const BlockDecoder decode = pick_decoder(p, active_cpu_path());
  claim_chunks(p.out_features, 16, kernel_threads(p.out_features * kp), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) decode_span(job, decode, r, 0, kp, dst + r * kp);
  });
}

}  // namespace packed
}  // namespace groupquant
