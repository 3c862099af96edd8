#include "ops/cpu/relu_bits_avx512.h"

#include <immintrin.h>

#include <cstring>

namespace hypatia::ops {
namespace {

// The mask of the first n <= 32 lanes.
inline uint64_t tail_mask(int64_t n) {
  return (uint64_t(1) << n) - 1;
}

// fn(c, n, lanes) for c = 0, kStep, 2 kStep, ... < count: the step's n elements in [c, count) and
// their lane mask. Full steps pass the constant kStep, so that their bit loads and stores inline.
template <int64_t kStep, typename Fn>
void in_steps(int64_t count, const Fn& fn) {
  int64_t c = 0;
  for (; c + kStep <= count; c += kStep) {
    fn(c, kStep, tail_mask(kStep));
  }
  if (c < count) {
    fn(c, count - c, tail_mask(count - c));
  }
}

inline void store_bits(uint8_t* bits, uint64_t mask, int64_t lanes) {
  std::memcpy(bits, &mask, static_cast<size_t>((lanes + 7) / 8));  // little-endian: lowest bit first
}

inline uint64_t load_bits(const uint8_t* bits, int64_t lanes) {
  uint64_t mask = 0;
  std::memcpy(&mask, bits, static_cast<size_t>((lanes + 7) / 8));
  return mask;
}

// !(v <= 0): the not-less-or-equal compare, unordered (NaN) true.
inline __mmask16 passes(__mmask16 lanes, const float* o) {
  return _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, o), _mm512_setzero_ps(), _CMP_NLE_UQ);
}

inline __mmask8 passes(__mmask8 lanes, const double* o) {
  return _mm512_mask_cmp_pd_mask(lanes, _mm512_maskz_loadu_pd(lanes, o), _mm512_setzero_pd(), _CMP_NLE_UQ);
}

// 16-bit floats on their bit patterns as int16: > 0 as an integer (sign clear, not +0: +Inf and +NaN
// included), or a NaN of either sign (magnitude bits above Inf's).
inline __mmask32 passes_16(__mmask32 lanes, const uint16_t* o, int16_t inf_bits) {
  const __m512i v = _mm512_maskz_loadu_epi16(lanes, o);
  const __mmask32 positive = _mm512_mask_cmpgt_epi16_mask(lanes, v, _mm512_setzero_si512());
  const __mmask32 nan =
      _mm512_mask_cmpgt_epi16_mask(lanes, _mm512_and_si512(v, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(inf_bits));
  return positive | nan;
}

template <typename T, int kLanes, typename Passes>
void pack(const T* o, int64_t count, uint8_t* bits, const Passes& passes_of) {
  in_steps<kLanes>(count, [&](int64_t c, int64_t n, uint64_t lanes) {
    store_bits(bits + c / 8, passes_of(lanes, o + c), n);
  });
}

}  // namespace

void pack_relu_bits_avx512(const void* o, int64_t count, ReluBitsElement element, uint8_t* bits) {
  switch (element) {
    case ReluBitsElement::kFloat64:
      pack<double, 8>(static_cast<const double*>(o), count, bits,
                      [](uint64_t lanes, const double* p) { return passes(static_cast<__mmask8>(lanes), p); });
      break;
    case ReluBitsElement::kFloat32:
      pack<float, 16>(static_cast<const float*>(o), count, bits,
                      [](uint64_t lanes, const float* p) { return passes(static_cast<__mmask16>(lanes), p); });
      break;
    case ReluBitsElement::kBFloat16:
    case ReluBitsElement::kFloat16: {
      const int16_t inf_bits = element == ReluBitsElement::kBFloat16 ? 0x7f80 : 0x7c00;
      pack<uint16_t, 32>(static_cast<const uint16_t*>(o), count, bits, [inf_bits](uint64_t lanes, const uint16_t* p) {
        return passes_16(static_cast<__mmask32>(lanes), p, inf_bits);
      });
      break;
    }
  }
}

void relu_avx512(const void* in, void* out, int64_t count, ReluBitsElement element) {
  // Each step's elements loaded, kept where they pass (else +0) and stored; none past count touched.
  switch (element) {
    case ReluBitsElement::kFloat64: {
      const auto* src = static_cast<const double*>(in);
      auto* dst = static_cast<double*>(out);
      in_steps<8>(count, [&](int64_t c, int64_t, uint64_t lanes) {
        const __mmask8 m = static_cast<__mmask8>(lanes);
        const __m512d v = _mm512_maskz_loadu_pd(m, src + c);
        const __mmask8 keep = _mm512_mask_cmp_pd_mask(m, v, _mm512_setzero_pd(), _CMP_NLT_UQ);  // !(v < 0)
        _mm512_mask_storeu_pd(dst + c, m, _mm512_maskz_mov_pd(keep, v));
      });
      break;
    }
    case ReluBitsElement::kFloat32: {
      const auto* src = static_cast<const float*>(in);
      auto* dst = static_cast<float*>(out);
      in_steps<16>(count, [&](int64_t c, int64_t, uint64_t lanes) {
        const __mmask16 m = static_cast<__mmask16>(lanes);
        const __m512 v = _mm512_maskz_loadu_ps(m, src + c);
        const __mmask16 keep = _mm512_mask_cmp_ps_mask(m, v, _mm512_setzero_ps(), _CMP_NLT_UQ);  // !(v < 0)
        _mm512_mask_storeu_ps(dst + c, m, _mm512_maskz_mov_ps(keep, v));
      });
      break;
    }
    case ReluBitsElement::kBFloat16:
    case ReluBitsElement::kFloat16: {
      const int16_t inf_bits = element == ReluBitsElement::kBFloat16 ? 0x7f80 : 0x7c00;
      const auto* src = static_cast<const uint16_t*>(in);
      auto* dst = static_cast<uint16_t*>(out);
      in_steps<32>(count, [&](int64_t c, int64_t, uint64_t lanes) {
        const __mmask32 m = static_cast<__mmask32>(lanes);
        const __m512i v = _mm512_maskz_loadu_epi16(m, src + c);
        const __m512i magnitude = _mm512_and_si512(v, _mm512_set1_epi16(0x7fff));
        // Negative numbers: sign set, magnitude in (0, Inf] (not -0, not a NaN).
        const __mmask32 negative = _mm512_mask_cmplt_epi16_mask(m, v, _mm512_setzero_si512()) &
            _mm512_cmpgt_epi16_mask(magnitude, _mm512_setzero_si512()) &
            _mm512_cmple_epi16_mask(magnitude, _mm512_set1_epi16(inf_bits));
        _mm512_mask_storeu_epi16(dst + c, m, _mm512_maskz_mov_epi16(~negative, v));
      });
      break;
    }
  }
}

void apply_relu_bits_avx512(const uint8_t* bits, const void* in, void* out, int64_t count, int element_bytes) {
  // Lanes not in the mask are zeroed (+0, as threshold_backward writes); none past count touched.
  if (element_bytes == 2) {
    const auto* src = static_cast<const uint16_t*>(in);
    auto* dst = static_cast<uint16_t*>(out);
    in_steps<32>(count, [&](int64_t c, int64_t n, uint64_t lanes) {
      const __mmask32 m = static_cast<__mmask32>(lanes);
      const __m512i v = _mm512_maskz_loadu_epi16(m, src + c);
      _mm512_mask_storeu_epi16(dst + c, m, _mm512_maskz_mov_epi16(static_cast<__mmask32>(load_bits(bits + c / 8, n)), v));
    });
  } else if (element_bytes == 4) {
    const auto* src = static_cast<const uint32_t*>(in);
    auto* dst = static_cast<uint32_t*>(out);
    in_steps<16>(count, [&](int64_t c, int64_t n, uint64_t lanes) {
      const __mmask16 m = static_cast<__mmask16>(lanes);
      const __m512i v = _mm512_maskz_loadu_epi32(m, src + c);
      _mm512_mask_storeu_epi32(dst + c, m, _mm512_maskz_mov_epi32(static_cast<__mmask16>(load_bits(bits + c / 8, n)), v));
    });
  } else {
    const auto* src = static_cast<const uint64_t*>(in);
    auto* dst = static_cast<uint64_t*>(out);
    in_steps<8>(count, [&](int64_t c, int64_t n, uint64_t lanes) {
      const __mmask8 m = static_cast<__mmask8>(lanes);
      const __m512i v = _mm512_maskz_loadu_epi64(m, src + c);
      _mm512_mask_storeu_epi64(dst + c, m, _mm512_maskz_mov_epi64(static_cast<__mmask8>(load_bits(bits + c / 8, n)), v));
    });
  }
}

}  // namespace hypatia::ops
