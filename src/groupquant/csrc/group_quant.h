// Per-element and per-block math of group-wise (MX) quantization, shared by the CPU and CUDA kernels.
//
// Every function here mirrors one step of the PyTorch reference (src/groupquant/ops/reference.py,
// shared_scale.py, element_round.py, codes.py, bits.py) and computes in float32 exactly as it does,
// so the kernels agree with it bit for bit:
//   - exponents come from the float32 bits (never from log2f, which rounds up just below 2^k);
//   - 2^k is built from bits, subnormal results included;
//   - x / scale is a true IEEE division for float scales, a product with the exact reciprocal
//     power of two for E8M0 scales (the same correctly rounded result);
//   - no fused multiply-add: build with -ffp-contract=off (g++) / --fmad=false (nvcc).
// The header has no torch dependency: it is plain C++17 / CUDA.
#pragma once

#include <cstdint>
#include <cstring>
#include <cmath>

#include "group_quant_params.h"  // the record, and GQ_HD (host and device, always inlined)

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
// The device code of nvcc converts float32 <-> bfloat16 / float16 with the card's instructions (IEEE
// round to nearest even, subnormals kept: the same bits as the software conversions below), the
// NaN code aside, which stays the software's. Everywhere else (CPU, the CUDA emulation) in software.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GQ_DEVICE_CONVERSIONS 1
#else
#define GQ_DEVICE_CONVERSIONS 0
#endif

namespace groupquant {

// ---- enums shared with the Python side (values are part of the op interface) ----------------

// How a minifloat spends codes on NaN / Inf (formats.SpecialValues, OCP already resolved).
enum Special : int32_t { kSpecialNone = 0, kSpecialIeee = 1, kSpecialNanOnly = 2, kSpecialFnuz = 3 };
// Shared-scale rule (shared_scale.SCALE_MODES).
enum ScaleMode : int32_t { kScaleFloor = 0, kScaleCeil = 1, kScaleEven = 2, kScaleRceil = 3, kScaleFloat = 4 };
// Element rounding (element_round.ROUNDING_MODES).
enum Rounding : int32_t { kRoundEven = 0, kRoundNearest = 1, kRoundFloor = 2, kRoundStochastic = 3 };
// How a scale value is stored (formats.ScaleKind). This header is the one C++ place that decides by
// scale kind: dispatch_scale_kind (the one switch), block_scale_as, scale_fields_error.
enum ScaleKind : int32_t { kScaleExponent = 0, kScaleFloat32 = 1, kScaleBFloat16 = 2, kScaleMinifloat = 3 };
// Number of scale kinds: a record's scale_kind is one of 0 .. kNumScaleKinds - 1.
constexpr int32_t kNumScaleKinds = 4;
// Their names in kernel order, for error messages.
constexpr const char* kScaleKindNames = "exponent, float32, bfloat16, minifloat";
// How a block's scale meets its elements: x * inv (power of two: exact), x / scale (float scales, a
// true division), or x * ((1 / g) / scale) and (v * scale) * g (two-level: a per-tensor g).
enum ScaleApply : int32_t { kApplyInv = 0, kApplyDiv = 1, kApplyTwoLevel = 2 };

// Largest exponent any exponent scale format holds (E8M0).
constexpr int32_t kE8M0MaxExp = 127;

// ---- bit casts -------------------------------------------------------------------------------

GQ_HD uint32_t f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

GQ_HD float u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

GQ_HD int32_t imax(int32_t a, int32_t b) { return a > b ? a : b; }
GQ_HD int32_t imin(int32_t a, int32_t b) { return a < b ? a : b; }

GQ_HD float quiet_nan() { return u2f(0x7FC00000u); }

// float32's largest finite value.
constexpr float kFloatMax = 3.4028234663852886e38f;

// Whether v is finite (not NaN, not +-Inf); a comparison, not a library call.
GQ_HD bool is_finite_value(float v) { return fabsf(v) <= kFloatMax; }

// ---- exact exponent arithmetic (bits.py) ----------------------------------------------------

// 2^k as float32 for integer k in [-149, 127], from the bits (subnormal powers included).
GQ_HD float exp2i(int32_t k) {
  const uint32_t normal = static_cast<uint32_t>(imax(k + 127, 1)) << 23;
  const uint32_t sub = 1u << imin(imax(k + 149, 0), 22);
  return u2f(k >= -126 ? normal : sub);
}

// 2^k as float32 for integer k in the normal range [-126, 127]: the exponent field alone (one
// integer operation, where exp2i spends several on the subnormal case).
GQ_HD float exp2i_normal(int32_t k) { return u2f(static_cast<uint32_t>(k + 127) << 23); }

// floor(log2|x|) read off the exponent field: exact for normal x; float32 zero and subnormals give
// -127, which callers clamp to a format's emin (>= -120), so they never need the exact value.
GQ_HD int32_t exponent_field_log2(float x) {
  return static_cast<int32_t>((f2u(x) >> 23) & 0xFFu) - 127;
}

// ---- storage types: bfloat16 / float16 bits <-> float32 (round to nearest even) -----------

GQ_HD float bf16_bits_to_float(uint16_t h) { return u2f(static_cast<uint32_t>(h) << 16); }

GQ_HD uint16_t float_to_bf16_bits(float f) {
#if GQ_DEVICE_CONVERSIONS
  const uint16_t h = __bfloat16_as_ushort(__float2bfloat16_rn(f));
  return f != f ? static_cast<uint16_t>(0x7FC0) : h;  // the card's NaN is 0x7FFF
#else
  const uint32_t u = f2u(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  const uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
#endif
}

GQ_HD float fp16_bits_to_float(uint16_t h) {
#if GQ_DEVICE_CONVERSIONS
  return __half2float(__ushort_as_half(h));  // exact (every float16 is a float32)
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t field = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  const uint32_t normal = sign | ((field + 112u) << 23) | (mant << 13);
  const uint32_t special = sign | 0x7F800000u | (mant << 13);
  const uint32_t small = sign | f2u(static_cast<float>(mant) * 5.9604644775390625e-08f);  // mant * 2^-24
  return u2f(field == 0x1Fu ? special : (field == 0 ? small : normal));
#endif
}

GQ_HD uint16_t float_to_fp16_bits(float f) {
#if GQ_DEVICE_CONVERSIONS
  const uint16_t h = __half_as_ushort(__float2half_rn(f));
  return f != f ? static_cast<uint16_t>(((f2u(f) >> 16) & 0x8000u) | 0x7E00u) : h;  // the card's NaN is 0x7FFF
#else
  const uint32_t u = f2u(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // normal half: drop 13 mantissa bits with round-to-nearest-even, rebias the exponent (127 -> 15)
  uint32_t r = a - 0x38000000u;
  r = (r + 0x0FFFu + ((r >> 13) & 1u)) >> 13;
  // subnormal half (|f| < 2^-14): an integer count of 2^-24, rounded to nearest even
  const uint32_t a_sub = a < 0x38800000u ? a : 0x38800000u;  // keep the unused lane in range
  const uint32_t sub = static_cast<uint32_t>(rintf(u2f(a_sub) * 16777216.0f));
  uint32_t out = a >= 0x38800000u ? r : sub;
  out = a >= 0x477FF000u ? 0x7C00u : out;  // >= 65520 rounds to Inf
  out = a > 0x7F800000u ? 0x7E00u : out;   // NaN
  return static_cast<uint16_t>(sign | out);
#endif
}

// ---- the element format, as the op receives it ---------------------------------------------

// The format fields are listed once, in group_quant_params.h (GQ_FORMAT_FIELDS: is_float,
// is_signed, exponent_bits, mantissa_bits, bias, emin = 1 - bias, emax (the binade the shared scale
// aligns to, OCP emax_elem), max_normal, qmin / qmax / frac_bits (integer formats), special
// (Special), nan_code (-1: none), even_bits (mantissa width scale_mode='even' rounds amax to),
// negative_zero (the format encodes -0), saturating (false: overflow gives Inf / NaN), exp_max (cap
// of the shared exponent for this input dtype)); the derived ones are filled by
// derive_format_constants (below), after make_format_params (csrc/ops.cpp) checked the fields.
struct FormatParams {
  GQ_FORMAT_FIELDS(GQ_DECLARE_FIELD)
  // derived
  int32_t qemin, qemax;    // the quantum of s is 2^(clamp(floor_log2 s, qemin, qemax) - qmant): qemax is the
  int32_t qmant;           // binade above the largest value, so a larger s saturates all the same
  int32_t quantum_shift;   // qmant << 23: the float32 bits of 2^quantum are s's exponent bits minus it ...
  int32_t quantum_lo;      // ... clamped to [quantum_lo, quantum_hi], the bits of 2^(qemin - qmant) ...
  int32_t quantum_hi;      // ... and of 2^(qemax - qmant)
  bool clamps;             // saturation is the clamp to [low, high] (saturating, and no -0 lost to it)
  float zero;              // +0 (formats without -0: v + 0 turns -0 into +0) or -0 (v + -0 is v, -0 too)
  float low, high;         // element values below low / above high are out of range ...
  float low_to, high_to;   // ... and become these (low / high when saturating, else -+Inf or NaN)
  float min_normal;        // 2^emin (float formats)
  float int_up;            // 2^frac_bits (integer formats)
  int32_t sign_code;       // the code's sign bit (float formats; 0 in unsigned ones)
  int32_t nan_code_or_0;   // the code of NaN: nan_code, 0 where there is none
  float rceil_sig;         // 2 * frexp(max_normal).mantissa, in [1, 2)
  int32_t rceil_shift;     // frexp(max_normal).exponent - 1
};

// Fills the derived constants of f from its fields (host only; the op checks the fields first:
// make_format_params in ops.cpp).
inline void derive_format_constants(FormatParams& f) {
  if (f.is_float) {
    f.qemin = f.emin;
    f.qemax = f.emax + 1;  // max_normal < 2^(emax + 1) (make_format_params checks it)
    f.qmant = f.mantissa_bits;
    f.low = f.is_signed ? -f.max_normal : 0.0f;
    f.high = f.max_normal;
    f.min_normal = exp2i(f.emin);
  } else {
    f.qemin = 127;  // pins the quantum to 2^-frac_bits
    f.qemax = 127;
    f.qmant = 127 + f.frac_bits;
    f.low = static_cast<float>(f.qmin) * exp2i(-f.frac_bits);
    f.high = static_cast<float>(f.qmax) * exp2i(-f.frac_bits);
    f.min_normal = 0.0f;
  }
  // beyond max normal: the bound itself (saturating), else Inf (IEEE formats) or NaN
  const float overflow = f.special == kSpecialIeee ? INFINITY : quiet_nan();
  f.high_to = f.saturating ? f.high : overflow;
  f.low_to = (f.saturating || !f.is_signed) ? f.low : -overflow;
  f.int_up = exp2i(f.frac_bits);
  f.zero = f.negative_zero ? -0.0f : 0.0f;
  f.sign_code = f.is_float && f.is_signed ? 1 << (f.exponent_bits + f.mantissa_bits) : 0;
  f.nan_code_or_0 = f.nan_code >= 0 ? f.nan_code : 0;
  f.quantum_shift = f.qmant << 23;
  f.quantum_lo = static_cast<int32_t>(f2u(exp2i_normal(f.qemin - f.qmant)));
  f.quantum_hi = static_cast<int32_t>(f2u(exp2i_normal(f.qemax - f.qmant)));
  // min(max(v, low), high) is the selects' result but for v = -0 at low = +0 (unsigned), which the
  // zero addition makes +0 unless the format keeps -0
  f.clamps = f.saturating && !(f.low == 0.0f && f.negative_zero);
  int e = 0;
  const double m = std::frexp(static_cast<double>(f.max_normal), &e);
  f.rceil_sig = static_cast<float>(2.0 * m);
  f.rceil_shift = e - 1;
}

// ---- shared scale of one block (shared_scale.py) -----------------------------------------

struct BlockScale {
  float scale;   // float32 scale (NaN for a block with NaN/Inf)
  float inv;     // 1 / scale for power-of-two scales (exact); (1 / g) / scale two-level; 1 (unused) else
  uint8_t code;  // the scale format's code (0 for float32 / bfloat16; the NaN code for NaN)
};

// floor(log2 x) and the significand x / 2^floor(log2 x) in [1, 2) of a finite positive float given
// by its bits, exactly and without branches (a subnormal is normalised by the exact conversion of
// its integer mantissa to float), so that loops over blocks vectorize.
struct Log2Split {
  int32_t exp;
  float sig;
};

GQ_HD Log2Split log2_split(uint32_t bits) {
  const bool sub = bits < 0x00800000u;
  const uint32_t norm = sub ? f2u(static_cast<float>(static_cast<int32_t>(bits))) : bits;  // bits < 2^23: exact
  Log2Split r;
  r.exp = static_cast<int32_t>(norm >> 23) - 127 - (sub ? 149 : 0);
  r.sig = u2f((norm & 0x007FFFFFu) | 0x3F800000u);
  return r;
}

// Scale of a block from the bits of its amax (|x| as uint32; NaN/Inf have bits >= 0x7F800000),
// for the power-of-two modes: the shared exponent, clamped to [-scale_bias, exp_max] (the exponent
// scale format's range, capped at the input dtype's largest binade minus emax, so no finite block
// overflows; an all-zero block gets -scale_bias); floor: floor(log2 amax) - emax; ceil: one more unless amax is a power of two;
// even: one more when amax rounded to even_bits mantissa bits carries into the next binade; rceil:
// ceil(log2(amax / max_normal)). NaN/Inf in the block, or (scale_overflow_nan) an exponent above
// scale_bias: NaN scale, the NaN code. scale_flush_subnormal: a subnormal amax is an all-zero block. Branch-free (the mode
// enters through integer arithmetic), so a loop over blocks vectorizes. Mode: the rule fixed at compile
// time (the other rules' terms fold away), or kScaleModeAny to read it from `mode`.
constexpr int32_t kScaleModeAny = -1;

template <int32_t Mode = kScaleModeAny>
GQ_HD BlockScale pow2_block_scale(uint32_t amax_bits, const FormatParams& f, int32_t mode) {
  if constexpr (Mode != kScaleModeAny) mode = Mode;
  const bool nonfinite = amax_bits >= 0x7F800000u;
  const uint32_t bits = nonfinite ? 0u : amax_bits;  // as the reference, which zeroes them first
  const Log2Split a = log2_split(bits);
  const int32_t is_ceil = mode == kScaleCeil, is_even = mode == kScaleEven, is_rceil = mode == kScaleRceil;
  const int32_t up_ceil = a.sig > 1.0f ? 1 : 0;
  const int32_t up_even = rintf(a.sig * exp2i(f.even_bits)) >= exp2i(f.even_bits + 1) ? 1 : 0;
  const int32_t up_rceil = a.sig > f.rceil_sig ? 1 : 0;
  const int32_t shift = f.emax + is_rceil * (f.rceil_shift - f.emax);
  int32_t e = a.exp - shift + is_ceil * up_ceil + is_even * up_even + is_rceil * up_rceil;
  const int32_t low = -f.scale_bias;
  const bool flush = f.scale_flush_subnormal && bits < 0x00800000u;  // a subnormal amax: an all-zero block
  e = (bits == 0 || flush) ? low : e;
  const bool nan = nonfinite || (f.scale_overflow_nan && bits != 0 && !flush && e > f.scale_bias);  // NaN above
  e = imin(imax(e, low), f.exp_max);
  BlockScale s;
  s.scale = nan ? quiet_nan() : exp2i(e);
  s.inv = nan ? quiet_nan() : (flush ? 0.0f : exp2i(-e));  // flushed: elements x * 0 (signed zeros)
  s.code = static_cast<uint8_t>(nan ? f.scale_nan_code : e + f.scale_bias);
  return s;
}

// Round a positive float32 s (already clamped to [scale_min, scale_max]) onto the scale format Kind
// (ScaleKind): float32 as is; bfloat16 to nearest even; a minifloat (s at least its min normal) to
// nearest even with its mantissa_bits (no overflow: scale_max is on the grid).
template <int Kind>
GQ_HD float round_scale(float s, const FormatParams& f) {
  if constexpr (Kind == kScaleMinifloat) {
    const int32_t e = exponent_field_log2(s);
    return rintf(s * exp2i(f.scale_mantissa_bits - e)) * exp2i(e - f.scale_mantissa_bits);
  } else if constexpr (Kind == kScaleBFloat16) {
    const uint32_t u = f2u(s);  // s is finite and positive: bfloat16 rounding without the NaN case
    return u2f((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
  } else {
    return s;
  }
}

// min(v, float32 max) for a v that is not NaN (a select, so loops over blocks vectorize).
GQ_HD float saturate_to_max(float v) { return v > kFloatMax ? kFloatMax : v; }

// Code of a minifloat scale s (normal, on the grid): exponent field and top mantissa bits.
GQ_HD int32_t encode_minifloat_scale(float s, const FormatParams& f) {
  const uint32_t b = f2u(s);
  const int32_t field = static_cast<int32_t>(b >> 23) - 127 + f.scale_bias;
  const uint32_t mant = (b & 0x007FFFFFu) >> (23 - f.scale_mantissa_bits);
  return static_cast<int32_t>((static_cast<uint32_t>(field) << f.scale_mantissa_bits) | mant);
}

// The float rule (shared_scale._float_block_scale) for scale format Kind: s = round(clamp((amax /
// max_normal) / g, scale_min, scale_max)), 1 where that is 0; g is the per-tensor scale (1 without
// one: an exact division). NaN scale and the NaN code for a block with NaN/Inf, or for any block when
// g is NaN. inv = min((1 / g) / s, float32 max) (two-level scaling multiplies by it; single-level
// divides by s instead): it overflows when g * s < 2^-128 (all-zero or tiny tensors), and Inf would
// turn 0 into NaN. Selects only (a loop over blocks vectorizes).
template <int Kind>
GQ_HD BlockScale float_block_scale_as(uint32_t amax_bits, const FormatParams& f, float g) {
  const bool bad_g = !is_finite_value(g);
  const bool nonfinite = amax_bits >= 0x7F800000u || bad_g;
  const float gg = bad_g ? 1.0f : g;
  float sc = u2f(nonfinite ? 0u : amax_bits) / f.max_normal;
  sc = sc / gg;
  sc = sc < f.scale_min ? f.scale_min : sc;  // sc is not NaN here; selects (not fminf/fmaxf) vectorize
  sc = sc > f.scale_max ? f.scale_max : sc;
  sc = round_scale<Kind>(sc, f);
  sc = sc > 0.0f ? sc : 1.0f;
  BlockScale s;
  s.scale = nonfinite ? quiet_nan() : sc;
  s.inv = nonfinite ? quiet_nan() : saturate_to_max((1.0f / gg) / sc);
  const int32_t code = Kind == kScaleMinifloat ? encode_minifloat_scale(sc, f) : 0;
  s.code = static_cast<uint8_t>(nonfinite && f.scale_nan_code >= 0 ? f.scale_nan_code : code);
  return s;
}

// The smallest per-tensor scale g (float32's smallest normal, 2^-126: shared_scale.MIN_TENSOR_SCALE).
constexpr float kMinTensorScale = 1.17549435082228750797e-38f;

// The per-tensor scale g of two-level scaling (NVFP4's second level) of a tensor whose least and
// greatest values are lo and hi (shared_scale.tensor_scale_of): max(amax / divisor, 2^-126) with
// amax = max(hi, -lo) = max |x| and divisor = scale_max * max_normal (exact in float32, 2688 for
// NVFP4), an IEEE float32 division; NaN when the tensor holds a NaN (then lo and hi are NaN) or an
// Inf (then amax is Inf).
GQ_HD float tensor_scale_value(float lo, float hi, float divisor) {
  if (lo != lo || hi != hi) return quiet_nan();
  const float amax = hi > -lo ? hi : -lo;
  if (!is_finite_value(amax)) return quiet_nan();
  const float g = amax / divisor;
  return g < kMinTensorScale ? kMinTensorScale : g;
}

// ---- scale kinds: the one switch ----------------------------------------------------------

// A scale kind as a type (ScaleKindTag<K>::value is K), so code templated on the kind is chosen
// once per call rather than per block.
template <int32_t Kind>
struct ScaleKindTag {
  static constexpr int32_t value = Kind;
};

// fn(ScaleKindTag<kind>{}) for a run-time scale kind: the one switch over scale kinds in C++ (a new
// kind is one case here). A kind out of range (ops.cpp refuses it) goes as float32.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Fn>
GQ_HD auto dispatch_scale_kind(int32_t kind, Fn&& fn) -> decltype(fn(ScaleKindTag<kScaleFloat32>{})) {
  switch (kind) {
    case kScaleExponent: return fn(ScaleKindTag<kScaleExponent>{});
    case kScaleBFloat16: return fn(ScaleKindTag<kScaleBFloat16>{});
    case kScaleMinifloat: return fn(ScaleKindTag<kScaleMinifloat>{});
    default: return fn(ScaleKindTag<kScaleFloat32>{});
  }
}

// The scale of a block in scale format Kind: an exponent scale by the power-of-two rule `mode`
// (pow2_block_scale), a float-valued one by the float rule with per-tensor scale g (1 without one).
// ops.cpp pairs the rule with the kind (the float rule exactly for float-valued kinds).
template <int32_t Kind>
GQ_HD BlockScale block_scale_as(uint32_t amax_bits, const FormatParams& f, int32_t mode, float g) {
  if constexpr (Kind == kScaleExponent) {
    return pow2_block_scale(amax_bits, f, mode);
  } else {
    return float_block_scale_as<Kind>(amax_bits, f, g);
  }
}

// The scale of a block (shared_scale.group_scale) in the scale format the record names.
GQ_HD BlockScale block_scale(uint32_t amax_bits, const FormatParams& f, int32_t mode, float g) {
  return dispatch_scale_kind(f.scale_kind, [&](auto kind) {
    return block_scale_as<decltype(kind)::value>(amax_bits, f, mode, g);
  });
}

// Whether scales of this kind are powers of two (the power-of-two rules make them; the float rule
// makes every other kind).
GQ_HD bool scale_kind_is_power_of_two(int32_t kind) { return kind == kScaleExponent; }

// What is wrong with a record's scale fields for scale format Kind, or nullptr (checked by ops.cpp):
// an exponent scale needs scale_bias in [1, 127], exp_max <= scale_bias and a byte NaN code; a
// minifloat 0..7 mantissa bits and a finite normal range [scale_min, scale_max]; only a minifloat
// takes a per-tensor scale.
template <int32_t Kind>
inline const char* scale_fields_error_as(const FormatParams& f) {
  if constexpr (Kind == kScaleExponent) {
    if (!(f.scale_bias >= 1 && f.scale_bias <= 127 && f.exp_max <= f.scale_bias)) {
      return "an exponent scale needs scale_bias in [1, 127] and exp_max <= scale_bias";
    }
    if (!(f.scale_nan_code >= 0 && f.scale_nan_code <= 255)) return "scale_nan_code must be a byte";
  } else if constexpr (Kind == kScaleMinifloat) {
    if (!(f.scale_mantissa_bits >= 0 && f.scale_mantissa_bits <= 7 && f.scale_min >= exp2i(-126) &&
          f.scale_max >= f.scale_min && std::isfinite(f.scale_max))) {
      return "a minifloat scale needs 0..7 mantissa bits and a normal range [scale_min, scale_max]";
    }
  }
  if (f.tensor_scale && Kind != kScaleMinifloat) return "tensor_scale needs a minifloat scale format";
  return nullptr;
}

// scale_fields_error_as for the record's scale kind (which must be in range).
inline const char* scale_fields_error(const FormatParams& f) {
  return dispatch_scale_kind(f.scale_kind, [&](auto kind) { return scale_fields_error_as<decltype(kind)::value>(f); });
}

// x brought onto the element grid's scale, by how the block scale applies (ScaleApply).
template <int Apply>
GQ_HD float scale_input(float x, const BlockScale& sc) {
  return Apply == kApplyDiv ? x / sc.scale : x * sc.inv;
}

// The clipped straight-through estimator's mask of a scaled element s: |s| within the format's
// largest normal (its gradient passes; outside, the element saturated or overflowed).
GQ_HD bool within_range(float s, const FormatParams& f) { return fabsf(s) <= f.max_normal; }

// An element value v back to the input's scale: v * scale, then * g for two-level scaling.
template <int Apply>
GQ_HD float unscale_element(float v, float scale, float g) {
  return Apply == kApplyTwoLevel ? (v * scale) * g : v * scale;
}

// ---- element rounding (element_round.py) -------------------------------------------------

// Uniform float in [0, 1) on the grid k * 2^-24 from (linear element index, seed): the 32-bit
// murmur3 finalizer of index * 0x9E3779B9 + seed (mod 2^32), top 24 bits.
GQ_HD float uniform_from_hash(uint64_t index, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(index) * 0x9E3779B9u + seed;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return static_cast<float>(h >> 8) * 5.9604644775390625e-08f;  // * 2^-24
}

// How a rounding mode decides to round a magnitude up, written so that one branch-free function
// serves all modes: up when frac > threshold, or on a tie (frac == threshold) by the tie rule.
//   even:       threshold 0.5, ties to the even integer (IEEE nearest-even, torch.round)
//   nearest:    threshold 0.5, ties away from zero
//   floor:      threshold 2 (never up): toward zero
//   stochastic: threshold = uniform noise in [0, 1), no tie rule (up iff noise < frac)
struct RoundRule {
  float threshold;
  bool ties_away;
  bool ties_even;
};

GQ_HD RoundRule round_rule(int32_t rounding) {
  RoundRule r;
  r.threshold = rounding == kRoundFloor ? 2.0f : 0.5f;
  r.ties_away = rounding == kRoundNearest;
  r.ties_even = rounding == kRoundEven;
  return r;
}

// Round y (float32) to an integer by the rule (threshold overrides rule.threshold, for the
// stochastic noise); keeps the sign, exact (equals rintf / truncf for even / floor).
GQ_HD float round_integer(float y, const RoundRule& rule, float threshold) {
  const float a = fabsf(y);
  const float whole = floorf(a);
  const float frac = a - whole;  // exact
  const float half = whole * 0.5f;
  const bool odd = half != floorf(half);
  const bool tie_up = rule.ties_away || (rule.ties_even && odd);
  const bool up = frac > threshold || (frac == threshold && tie_up);
  return copysignf(whole + (up ? 1.0f : 0.0f), y);
}

// v saturated to the format's range (round_to_format): a value above high becomes high_to (high
// itself when saturating, else +Inf / NaN), one below low becomes low_to; comparisons keep NaN and
// -0, like torch.clamp. Clamp (only where f.clamps: then low_to = low, high_to = high): the card's
// NaN-propagating min / max on sm_80 and newer, two instructions where the selects take four (the
// same value, NaN aside, whose payload may differ); the selects everywhere else.
template <bool Clamp = false>
GQ_HD float saturate(float v, const FormatParams& f) {
#if GQ_DEVICE_CONVERSIONS
  if constexpr (Clamp) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(v), "f"(f.low));
    asm("min.NaN.f32 %0, %0, %1;" : "+f"(r) : "f"(f.high));
    return r;
  }
#endif
  v = v < f.low ? f.low_to : v;
  return v > f.high ? f.high_to : v;
}

// Round a scaled value s = x / scale onto the format's grid, as if the exponent range had no top,
// then saturate (saturate).
// Integer formats take the same path: their quantum is the constant 2^-frac_bits (qemin = 127
// pins the exponent, qmant = 127 + frac_bits) and their saturation bounds are qmin/qmax * 2^-frac,
// which scale exactly, so the result equals clamp(round(s * 2^frac), qmin, qmax) * 2^-frac.
// Rint = true is the fast path for rounding='even': rintf (the hardware's nearest-even) gives the
// same integer as round_integer with the even rule, in one instruction.
// The exponent is clamped to [qemin, qemax]: a larger |s| (Inf and NaN too) lies beyond the format's
// largest value whatever its quantum, so it saturates as the unclamped rounding would, and both
// 2^quantum and 2^-quantum stay normal (make_format_params keeps float formats inside 2^-120 ..
// 2^120 and integers' frac_bits at most 24). Both are built from s's exponent bits in place: the
// bits of 2^quantum are those bits minus qmant << 23, clamped (quantum_lo / quantum_hi), and the
// exponent fields of 2^quantum and 2^-quantum sum to 254.
template <bool Rint = false, bool Clamp = false>
GQ_HD float quantize_element(float s, const FormatParams& f, const RoundRule& rule, float threshold) {
  const int32_t exp_bits = static_cast<int32_t>(f2u(s) & 0x7F800000u);
  const int32_t up = imin(imax(exp_bits - f.quantum_shift, f.quantum_lo), f.quantum_hi);  // bits of 2^quantum
  const float y = s * u2f(static_cast<uint32_t>((254 << 23) - up));  // * 2^-quantum: exact
  const float n = Rint ? rintf(y) : round_integer(y, rule, threshold);
  const float v = saturate<Clamp>(n * u2f(static_cast<uint32_t>(up)), f);
  return v + f.zero;  // no -0 in formats that cannot encode it (zero = +0 there; -0 keeps v)
}

// Rounding kinds the kernels compile a loop for: 'even' (rintf), 'nearest' / 'floor' (the rule's
// threshold and tie rule), stochastic (a hashed noise threshold per element).
enum RoundKind : int { kKindEven = 0, kKindRule = 1, kKindStochastic = 2 };

// The rounding kind of a Rounding mode.
GQ_HD int round_kind(int32_t rounding) {
  return rounding == kRoundEven ? kKindEven : (rounding == kRoundStochastic ? kKindStochastic : kKindRule);
}

// quantize_element for rounding kind Kind; `index` (the element's linear index in x) and `seed`
// draw the stochastic threshold (uniform_from_hash), the other kinds ignore them.
// Clamp: saturate by the clamp (only where f.clamps).
template <int Kind, bool Clamp = false>
GQ_HD float round_element(float s, const FormatParams& f, const RoundRule& rule, uint64_t index, uint32_t seed) {
  const float threshold = Kind == kKindStochastic ? uniform_from_hash(index, seed) : rule.threshold;
  return quantize_element<Kind == kKindEven, Clamp>(s, f, rule, threshold);
}

// ---- element codes (codes.py encode) ----------------------------------------------------

// Bit encoding of an element value v already on the format's grid (NaN allowed), as int32.
// Branch-free (selects only), so a loop over a block vectorizes; the integer and the float case are
// separate functions, so that a loop that calls one of them has no control flow (encode_element
// picks by the format). Integer formats: the two's complement integer v * 2^frac_bits (NaN: 0).
// encode_int_element of a finite v (the saturating CUDA kernels': see encode_finite_float_element).
GQ_HD int32_t encode_finite_int_element(float v, const FormatParams& f) { return static_cast<int32_t>(v * f.int_up); }

GQ_HD int32_t encode_int_element(float v, const FormatParams& f) {
  const bool nan = (f2u(v) & 0x7FFFFFFFu) > 0x7F800000u;
  return nan ? 0 : encode_finite_int_element(v, f);
}

// Float formats: a normal value's code is its float32 magnitude bits shifted right by 23 - m (the
// exponent field and the top m mantissa bits, exact as v is on the grid) less (127 - bias) << m,
// which rebiases the exponent; a subnormal's is its count of min-subnormal steps, read the same way
// off |v| + min_normal (exact: a value of the binade [min_normal, 2 min_normal) whose mantissa is
// that count) less the code of min_normal. The sign bit is set for negative values of signed
// formats; v is a finite value quantize_element returns (so no -0 where the format has none, as in
// fnuz formats, whose code 0x80 is NaN). The saturating CUDA kernels call this alone: their values
// are finite but in NaN blocks, whose codes they set to the NaN code after.
GQ_HD int32_t encode_finite_float_element(float v, const FormatParams& f) {
  const uint32_t vb = f2u(v);
  const int32_t m = f.mantissa_bits;
  const float af = u2f(vb & 0x7FFFFFFFu);
  const bool normal = af >= f.min_normal;
  const uint32_t bits = normal ? (vb & 0x7FFFFFFFu) : f2u(af + f.min_normal);  // on the grid of min_normal's binade
  const int32_t below = ((127 - f.bias) << m) + (normal ? 0 : (1 << m));  // the code of 2^-bias, of min_normal
  const int32_t code = static_cast<int32_t>(bits >> (23 - m)) - below;
  return code | static_cast<int32_t>(vb >> 31) * f.sign_code;
}

// encode_finite_float_element, and NaN: the NaN code (-1: none, then 0); +-Inf: the IEEE formats'
// Inf code (0 in formats without one, where no rounding makes Inf), the sign bit as above.
GQ_HD int32_t encode_float_element(float v, const FormatParams& f) {
  const uint32_t vb = f2u(v);
  const uint32_t ab = vb & 0x7FFFFFFFu;
  const int32_t inf_code = f.special == kSpecialIeee ? ((1 << f.exponent_bits) - 1) << f.mantissa_bits : 0;
  const int32_t code = ab == 0x7F800000u ? inf_code | static_cast<int32_t>(vb >> 31) * f.sign_code
                                         : encode_finite_float_element(v, f);
  return ab > 0x7F800000u ? f.nan_code_or_0 : code;
}

GQ_HD int32_t encode_element(float v, const FormatParams& f) {
  return f.is_float ? encode_float_element(v, f) : encode_int_element(v, f);
}

}  // namespace groupquant
