#pragma once
// Applying a ReLU bit mask (layout in ops/checks.h) to gradients on the CPU.
#if defined(HYPATIA_WITH_AVX512_RELU_BITS)
#include "ops/cpu/relu_bits_avx512.h"
#endif

#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace hypatia::ops {

#if defined(HYPATIA_WITH_AVX512_RELU_BITS)
// How the AVX-512 passes read elements of `dtype`; nullopt for the dtypes they do not cover.
inline std::optional<ReluBitsElement> relu_bits_element(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kDouble: return ReluBitsElement::kFloat64;
    case c10::kFloat: return ReluBitsElement::kFloat32;
    case c10::kBFloat16: return ReluBitsElement::kBFloat16;
    case c10::kHalf: return ReluBitsElement::kFloat16;
    default: return std::nullopt;
  }
}
#endif

// The elements' bit patterns as unsigned integers of their size.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;

// For every mask byte, 8 all-ones/all-zeros words: the backward ANDs 8 gradients with them, which
// vectorizes where a per-element bit test did not (~8x slower than threshold_backward).
template <typename U>
const std::array<std::array<U, 8>, 256>& expanded_masks() {
  static const auto table = [] {
    std::array<std::array<U, 8>, 256> t{};
    for (int byte = 0; byte < 256; ++byte) {
      for (int j = 0; j < 8; ++j) {
        t[byte][j] = (byte >> j) & 1 ? static_cast<U>(~U(0)) : U(0);
      }
    }
    return t;
  }();
  return table;
}

// out[0, count) = in[0, count) where the mask bits (byte-aligned) are set, +0 elsewhere (the bit
// patterns ANDed, as threshold_backward writes +0). in == out works in place.
template <typename U>
void apply_relu_bits(const uint8_t* bits, const U* in, U* out, int64_t count) {
#if defined(HYPATIA_WITH_AVX512_RELU_BITS)
  if (relu_bits_avx512_supported()) {
    apply_relu_bits_avx512(bits, in, out, count, static_cast<int>(sizeof(U)));
    return;
  }
#endif
  const auto& masks = expanded_masks<U>();
  int64_t c = 0;
#if defined(__SSE2__)
  if constexpr (sizeof(U) == 2) {
    // One mask byte's 8 words are one SSE2 register (the loop below stayed scalar for 16-bit
    // elements: 2.5 ms for 65536x64 bfloat16 gradients, against threshold_backward's 1.0, one thread).
    for (; c + 8 <= count; c += 8) {
      const __m128i m = _mm_loadu_si128(reinterpret_cast<const __m128i*>(masks[bits[c / 8]].data()));
      const __m128i g = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c), _mm_and_si128(g, m));
    }
  }
#endif
  for (; c + 8 <= count; c += 8) {
    const std::array<U, 8>& m = masks[bits[c / 8]];
    for (int j = 0; j < 8; ++j) {
      out[c + j] = in[c + j] & m[j];
    }
  }
  for (; c < count; ++c) {
    out[c] = in[c] & masks[bits[c / 8]][c % 8];
  }
}

}  // namespace hypatia::ops
