// The op parameter records and the helpers both records share.
//
// The group ops' record (below: GQ_CALL_FIELDS, GQ_FORMAT_FIELDS) is the ONE C++ list of the
// settings a groupquant op receives; the packed GEMM's record (GQP_FIELDS, packed_gemm.h) uses the
// same helpers: GQ_DECLARE_FIELD, GQ_FIELD_NAME, GQ_COUNT_FIELD, FieldReader / GQ_READ_FIELD and the
// host / device macro GQ_HD.
//
// Python packs a frozen dataclass (ops/kernel_params.py, class KernelParams) into the op argument
// `int[] params`, one int64 per field, in field order; this file lists the same fields in the same
// order. X(type, name) below declares the struct members, unpacks the array and spells the names
// the extension reports (op groupquant::kernel_param_fields), which Python compares with the
// dataclass at load time. Adding a field: one line here, one field in KernelParams.
//
// Packing per type: bool as 0/1, int32/int64 as the integer, uint32 as 0 .. 2^32-1, float as the
// bit pattern of the float32 value (0 .. 2^32-1).
// No torch dependency (plain C++17 / CUDA): the CPU, CUDA and op sources all include it.
#pragma once

#include <cstdint>
#include <cstring>

// Functions the CPU and CUDA kernels both call: host and device, always inlined.
#if defined(__CUDACC__)
#define GQ_HD __host__ __device__ __forceinline__
#else
#define GQ_HD inline __attribute__((always_inline))
#endif

// X-macro helpers of a record's field list X(type, name): the member declaration, the name as
// "name," (a record's names are one string with a trailing comma) and a count (`0 LIST(GQ_COUNT_FIELD)`).
#define GQ_DECLARE_FIELD(type, name) type name;
#define GQ_FIELD_NAME(type, name) #name ","
#define GQ_COUNT_FIELD(type, name) +1

namespace groupquant {

// The call: how the tensor is grouped and how scales and elements round.
#define GQ_CALL_FIELDS(X) \
  X(int64_t, dim)         \
  X(int64_t, block_size)  \
  X(int32_t, scale_mode)  \
  X(int32_t, rounding)    \
  X(uint32_t, seed)

// The element format (read off groupquant.formats), plus the input dtype's shared-exponent cap,
// then the scale format (ScaleKind; exponent formats: scale_bias, exponents in [-scale_bias,
// exp_max]; minifloats: bias, mantissa bits and the clamp range [scale_min, scale_max]; the NaN code,
// -1: none) and whether a per-tensor second scale is applied (its value comes as a tensor).
#define GQ_FORMAT_FIELDS(X)   \
  X(bool, is_float)           \
  X(bool, is_signed)          \
  X(int32_t, exponent_bits)   \
  X(int32_t, mantissa_bits)   \
  X(int32_t, bias)            \
  X(int32_t, emin)            \
  X(int32_t, emax)            \
  X(float, max_normal)        \
  X(int32_t, qmin)            \
  X(int32_t, qmax)            \
  X(int32_t, frac_bits)       \
  X(int32_t, special)         \
  X(int32_t, nan_code)        \
  X(int32_t, even_bits)       \
  X(bool, negative_zero)      \
  X(bool, saturating)         \
  X(int32_t, exp_max)         \
  X(int32_t, scale_kind)      \
  X(int32_t, scale_bias)      \
  X(int32_t, scale_mantissa_bits) \
  X(float, scale_min)         \
  X(float, scale_max)         \
  X(int32_t, scale_nan_code)  \
  X(bool, tensor_scale)       \
  X(bool, scale_overflow_nan) \
  X(bool, scale_flush_subnormal)

// The call fields as one struct (the format fields live in FormatParams, group_quant.h).
struct CallParams {
  GQ_CALL_FIELDS(GQ_DECLARE_FIELD)
};

// "dim,block_size,...,exp_max," (packed order; a trailing comma).
constexpr const char kParamFieldNames[] = GQ_CALL_FIELDS(GQ_FIELD_NAME) GQ_FORMAT_FIELDS(GQ_FIELD_NAME);

constexpr int kNumParams = 0 GQ_CALL_FIELDS(GQ_COUNT_FIELD) GQ_FORMAT_FIELDS(GQ_COUNT_FIELD);

// One packed int64 as a field of type T; false when it is out of that type's range.
inline bool unpack_value(int64_t v, int64_t* out) {
  *out = v;
  return true;
}
inline bool unpack_value(int64_t v, int32_t* out) {
  *out = static_cast<int32_t>(v);
  return v >= INT32_MIN && v <= INT32_MAX;
}
inline bool unpack_value(int64_t v, uint32_t* out) {
  *out = static_cast<uint32_t>(v);
  return v >= 0 && v <= static_cast<int64_t>(UINT32_MAX);
}
inline bool unpack_value(int64_t v, bool* out) {
  *out = v != 0;
  return v == 0 || v == 1;
}
inline bool unpack_value(int64_t v, float* out) {
  const uint32_t bits = static_cast<uint32_t>(v);
  std::memcpy(out, &bits, sizeof bits);
  return v >= 0 && v <= static_cast<int64_t>(UINT32_MAX);
}

// Reads a record's packed values in field order: read(&field, "name") takes the next value and
// keeps the first field whose value does not fit its type (bad; nullptr while all fit).
struct FieldReader {
  const int64_t* packed;
  int next = 0;
  const char* bad = nullptr;

  template <class T>
  void read(T* field, const char* name) {
    if (!unpack_value(packed[next++], field) && bad == nullptr) bad = name;
  }
};

// One field of the record `rec` (a pointer in scope) through the FieldReader `reader` in scope.
#define GQ_READ_FIELD(type, name) reader.read(&rec->name, #name);

// Fills call and format fields (F: FormatParams) from kNumParams packed values; returns the name of
// the first field whose value does not fit its type, or nullptr when all fit.
template <class F>
const char* unpack_params(const int64_t* packed, CallParams* call, F* fmt) {
  FieldReader reader{packed};
  {
    CallParams* rec = call;
    GQ_CALL_FIELDS(GQ_READ_FIELD)
  }
  {
    F* rec = fmt;
    GQ_FORMAT_FIELDS(GQ_READ_FIELD)
  }
  return reader.bad;
}

}  // namespace groupquant
