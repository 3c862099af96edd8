#pragma once
// AVX-512 forms of the CPU's ReLU passes, chosen at run time: the bit mask (layout in ops/checks.h)
// packed and applied, and the ReLU itself. One compare yields 16 (float32) or 32 (16-bit) mask bits
// and one masked move applies them, where the SSE2 forms take a table lookup or a movemask per 8
// elements (float32 256x512: 2.4x the time of eager's threshold_backward), and ATen's bfloat16 ReLU
// converts each element to float and back (1024x2048: 3.8x the time of a copy, one thread). Pure
// C++ on raw pointers: relu_bits_avx512.cpp is compiled with -mavx512f -mavx512bw and must share no
// inline code with the rest of the library.
#include <cstdint>

namespace hypatia::ops {

// Whether this CPU runs them (AVX-512 F and BW), asked once; in ops/cpu/relu_mask_cpu.cpp.
bool relu_bits_avx512_supported();

// How the packing reads an element: as the float type of its size, or as a 16-bit float whose
// all-ones exponent, shifted into place, is `inf_bits` (bfloat16 0x7f80, float16 0x7c00).
enum class ReluBitsElement { kFloat64, kFloat32, kBFloat16, kFloat16 };

// bits[0, ceil(count / 8)) from o[0, count): bit j set where !(o[j] <= 0) (NaN included), as
// eager's ReLU backward passes the gradient; the last byte's bits past count clear.
void pack_relu_bits_avx512(const void* o, int64_t count, ReluBitsElement element, uint8_t* bits);

// out[0, count) = torch.relu(in[0, count)): negative numbers (-Inf included) become +0, everything
// else (NaN, +-0, positives) is kept bit for bit. in == out works in place.
void relu_avx512(const void* in, void* out, int64_t count, ReluBitsElement element);

// out[0, count) = in[0, count) where the mask bits are set, +0 elsewhere; elements of
// `element_bytes` (2, 4 or 8). in == out works in place.
void apply_relu_bits_avx512(const uint8_t* bits, const void* in, void* out, int64_t count, int element_bytes);

}  // namespace hypatia::ops
