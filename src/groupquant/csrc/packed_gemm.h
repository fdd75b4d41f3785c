// Packed-weight GEMM: y[m, n] = sum_i x[m, i] * W[n, i] (+ b[n]), W decoded from its storage bits
// inside the loop, never materialized whole. Shared by the CPU and CUDA kernels.
//
// Weight storage (groupquant.packing, weight [N, K] grouped along K in blocks of B, k = ceil(K/B)
// blocks per row, the last zero-padded): `data` is the row-major stream of N * k * B element codes
// of `code_bits` bits each, least significant bit first (code j of the stream occupies bits
// [j*w, (j+1)*w); FP4 puts element 2b in the low nibble of byte b); `scale` holds one byte per
// block, [N, k].
//
// Decoding is table-driven (the tables are built in Python from the one definition of each format,
// groupquant.ops.codes.decode and the scale format's decode):
//   value(n, i) = (value_table[code(n, i)] * scale_table[scale[n, i / B]]) [* global_scale]
// value_table has 2^code_bits float32 entries (code -> element value); scale_table has 256 float32
// entries (scale byte -> scale; E8M0: 2^(s - 127), 0xFF -> NaN). Another scale format (E4M3 for
// NVFP4) is another scale_table; its per-tensor float32 second scale is `global_scale`, multiplied
// after the block scale (NVFP4: value = (q * s) * g, blocks of 16) when has_global_scale is set.
// Products are float32, as in the fake-quant dequantization (element * scale in float32).
//
// The CPU kernel may decode a code arithmetically instead of through value_table (`decode_path`),
// but only where Python has checked, for all 2^code_bits codes, that the arithmetic gives the
// table's float32 bits (groupquant/ops/packed_tables.py).
#pragma once

#include <cstdint>
#include <cstring>

#include "group_quant_params.h"  // the records' shared helpers (GQ_DECLARE_FIELD, FieldReader, GQ_HD)

namespace groupquant {
namespace packed {

// How the CPU kernel turns codes into element values (the CUDA kernel always reads the table).
enum DecodePath : int32_t {
  kDecodeTable = 0,    // any width 1..8: value_table[code]
  kDecodeTable16 = 1,  // 4-bit codes: the 16-entry table held in vector registers
  kDecodeInt8 = 2,     // 8-bit: float(int8(code)) * elem_mul
  kDecodeHalf = 3,     // 8-bit: half bits (code & 0x80) << 8 | (code & 0x7F) << half_shift, times
                       // elem_mul; NaN where (code & 0x7F) == nan_low7 (nan_low7 >= 0)
  kDecodeNibbleBf16 = 4,  // 4-bit codes whose table values are exact in bfloat16: byte shuffles of
                          // the table's bfloat16 bytes (elem_mul, half_shift: powers of two, 1 / 0)
};

// The parameter record: field order = packed order of ops/packed_gemm_params.py (checked at load).
#define GQP_FIELDS(X)           \
  X(int64_t, in_features)       \
  X(int64_t, out_features)      \
  X(int64_t, block_size)        \
  X(int64_t, num_blocks)        \
  X(int32_t, code_bits)         \
  X(int32_t, decode_path)       \
  X(float, elem_mul)            \
  X(int32_t, half_shift)        \
  X(int32_t, nan_low7)          \
  X(bool, has_global_scale)     \
  X(float, global_scale)        \
  X(int64_t, tile_gemm_min_rows)

struct PackedGemmParams {
  GQP_FIELDS(GQ_DECLARE_FIELD)
};

constexpr const char kPackedFieldNames[] = GQP_FIELDS(GQ_FIELD_NAME);

constexpr int kNumPackedParams = 0 GQP_FIELDS(GQ_COUNT_FIELD);

// Fills p from kNumPackedParams values; returns the first field that does not fit, or nullptr.
inline const char* unpack_packed_params(const int64_t* packed, PackedGemmParams* p) {
  FieldReader reader{packed};
  PackedGemmParams* rec = p;
  GQP_FIELDS(GQ_READ_FIELD)
  return reader.bad;
}

// Bytes of one weight row in the stream (rows are whole bytes: block_size * code_bits % 8 == 0,
// checked by the op).
GQ_HD int64_t row_bytes(const PackedGemmParams& p) { return p.num_blocks * p.block_size * p.code_bits / 8; }

// The code of element j of a row (j counted from the row's first code), any width 1..8: it spans
// at most two bytes, read least significant bit first.
GQ_HD uint32_t code_at(const uint8_t* row, int64_t j, int32_t bits) {
  const int64_t bit = j * bits;
  const int64_t byte = bit >> 3;
  const int shift = static_cast<int>(bit & 7);
  uint32_t word = row[byte];
  if (shift + bits > 8) word |= static_cast<uint32_t>(row[byte + 1]) << 8;
  return (word >> shift) & ((1u << bits) - 1u);
}

// Everything a kernel reads, resolved (tensors as raw pointers).
struct PackedGemmJob {
  PackedGemmParams p;
  const uint8_t* data;         // [N, row_bytes]
  const uint8_t* scale;        // [N, num_blocks]
  const float* value_table;    // [2^code_bits]
  const float* scale_table;    // [256]
  const float* x;              // [M, num_blocks * block_size] float32, zero-padded columns
  const float* bias;           // [N] or nullptr
  float* out;                  // [M, N] float32
  int64_t rows;                // M
  bool x_bf16;                 // x holds bfloat16 values (the input was bfloat16)
};

}  // namespace packed
}  // namespace groupquant
