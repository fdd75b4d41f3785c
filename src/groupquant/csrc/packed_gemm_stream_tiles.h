// The row-tile loop the AVX-512 streaming kernels of the packed GEMM share
// (packed_gemm_stream_avx512.cpp, packed_gemm_stream_avx512_bf16.cpp): input rows in register tiles
// of up to kStreamTileRows, each tile's height a compile-time constant for the kernel.
//
// Plain C++ with no target options: include it before a file's `#pragma GCC target`. The kernel
// passes its tile function as a generic lambda defined after the pragma; this loop only calls it
// (once per tile of input rows and task of weight rows), so the hot loops inside the lambda are
// compiled, and inlined, with the kernel's own target options.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace groupquant {
namespace packed {

constexpr int kStreamTileRows = 8;  // input rows per register tile, at most

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

}  // namespace packed
}  // namespace groupquant
