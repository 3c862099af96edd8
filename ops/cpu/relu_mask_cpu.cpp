// CPU side of fused_linear_relu's training path, the same contract as on CUDA: the forward returns
// the output and its ReLU mask as bits (layout in ops/checks.h), the backward passes the gradient
// where a bit is set. One pass each, where the byte mask before took le, logical_not, a dtype
// conversion and threshold_backward; and 1 bit per element is saved instead of 1 byte.
#include "ops/checks.h"
#include "ops/cpu/cpu_layer.h"
#include "ops/cpu/relu_bits.h"
#include "ops/cpu/row_blocks.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstdint>
#include <cstring>

namespace hypatia::ops {
namespace {

// Eager relu's backward passes the gradient where !(out <= 0), NaN included.
template <typename T>
uint8_t passes(T v) {
  return !(static_cast<at::opmath_type<T>>(v) <= 0);
}

// Mask byte of 8 values o[0, 8): bit j set where o[j] passes. The 8 compares go into 8 bytes
// (which vectorizes) and one multiply gathers them into bits: byte j of x lands in bit j of the
// top byte of x * 0x0102040810204080 (no two partial products share a bit, so nothing carries).
template <typename T>
uint8_t full_mask_byte(const T* o) {
  uint8_t flags[8];
  for (int j = 0; j < 8; ++j) {
    flags[j] = passes(o[j]);
  }
  uint64_t x;
  std::memcpy(&x, flags, 8);
  return static_cast<uint8_t>((x * 0x0102040810204080ull) >> 56);
}

#if defined(__SSE2__)
// float32: cmpnle is true exactly where !(v <= 0), NaN included, and movemask gathers 4 such
// lanes into bits (packing 65536x64 outputs: 1.0 ms instead of 2.7 ms, one thread, measured).
inline uint8_t full_mask_byte(const float* o) {
  const __m128 zero = _mm_setzero_ps();
  const int low = _mm_movemask_ps(_mm_cmpnle_ps(_mm_loadu_ps(o), zero));
  const int high = _mm_movemask_ps(_mm_cmpnle_ps(_mm_loadu_ps(o + 4), zero));
  return static_cast<uint8_t>(low | (high << 4));
}

// 16-bit floats, on their bit patterns as int16: !(v <= 0) where v > 0 as an integer (sign clear,
// not +0: +Inf and +NaN included) or v is a NaN of either sign (magnitude bits above Inf's);
// `inf` is Inf's bit pattern. 8 lanes at once, then packed to bytes and gathered by movemask
// (packing 65536x64 bfloat16 outputs: 2.8 ms a call with the generic byte path, one thread).
inline uint8_t full_mask_byte_16(const void* o, int16_t inf) {
  const __m128i v = _mm_loadu_si128(static_cast<const __m128i*>(o));
  const __m128i positive = _mm_cmpgt_epi16(v, _mm_setzero_si128());
  const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(v, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(inf));
  const __m128i pass = _mm_or_si128(positive, nan);
  return static_cast<uint8_t>(_mm_movemask_epi8(_mm_packs_epi16(pass, pass)) & 0xff);
}

inline uint8_t full_mask_byte(const c10::BFloat16* o) {
  return full_mask_byte_16(o, 0x7f80);
}

inline uint8_t full_mask_byte(const c10::Half* o) {
  return full_mask_byte_16(o, 0x7c00);
}
#endif

// Mask byte of o[0, count), count <= 8.
template <typename T>
uint8_t mask_byte(const T* o, int64_t count) {
  if (count == 8) {
    return full_mask_byte(o);
  }
  uint8_t v = 0;
  for (int64_t j = 0; j < count; ++j) {
    v |= uint8_t(passes(o[j]) << j);
  }
  return v;
}

// The mask bytes of one row o[0, cols), zero-padded to row_bytes.
template <typename T>
void pack_row(const T* o, int64_t cols, uint8_t* b, int64_t row_bytes) {
#if defined(HYPATIA_WITH_AVX512_RELU_BITS)
  if (relu_bits_avx512_supported()) {
    pack_relu_bits_avx512(o, cols, *relu_bits_element(c10::CppTypeToScalarType<T>::value), b);
    const int64_t used = (cols + 7) / 8;
    std::memset(b + used, 0, static_cast<size_t>(row_bytes - used));
    return;
  }
#endif
  for (int64_t byte = 0; byte < row_bytes; ++byte) {
    const int64_t at = byte * 8;
    b[byte] = at < cols ? mask_byte(o + at, std::min<int64_t>(8, cols - at)) : 0;
  }
}

}  // namespace

#if defined(HYPATIA_WITH_AVX512_RELU_BITS)
// Here, not beside the kernels: code of their file may hold AVX-512 instructions.
bool relu_bits_avx512_supported() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return supported;
}
#endif

std::tuple<at::Tensor, at::Tensor> fused_linear_relu_masked_cpu(
    const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  check_linear_args("_fused_linear_relu_masked", input, weight, bias);
  const int64_t rows = batch_rows(input), cols = weight.size(0);
  const int64_t row_bytes = relu_mask_row_bytes(cols).expect_int();
  at::Tensor bits = at::empty({rows, row_bytes}, input.options().dtype(at::kByte));
  uint8_t* bits_ptr = bits.mutable_data_ptr<uint8_t>();
  // The bits of each stretch of rows, packed while the stretch is still in cache.
  auto pack = [&](const at::Tensor& out2d, int64_t first, int64_t count) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out2d.scalar_type(), "fused_linear_relu_masked_cpu", [&] {
      const scalar_t* out_ptr = out2d.const_data_ptr<scalar_t>();
      for (int64_t r = first; r < first + count; ++r) {
        pack_row(out_ptr + r * cols, cols, bits_ptr + r * row_bytes, row_bytes);
      }
    });
  };
  const at::Tensor out = linear_relu_cpu_2d(as_rows(input), weight, bias, RowsEpilogue(pack));
  return {unflatten_rows(out, input), bits};
}

at::Tensor relu_mask_backward_cpu(const at::Tensor& grad, const at::Tensor& mask) {
  check_relu_mask("_relu_mask_backward", grad, mask);
  const at::Tensor g = grad.contiguous();
  at::Tensor grad_in = at::empty(grad.sizes(), grad.options());
  if (grad.numel() == 0) {
    return grad_in;
  }
  const int64_t cols = grad.size(-1), rows = grad.numel() / cols, row_bytes = mask.size(1);
  const uint8_t* bits = mask.const_data_ptr<uint8_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "relu_mask_backward_cpu", [&] {
    // Bit patterns: a gradient ANDed with all-zeros is +0, as threshold_backward writes.
    using U = Bits<scalar_t>;
    const U* g_ptr = static_cast<const U*>(g.const_data_ptr());
    U* out_ptr = static_cast<U*>(grad_in.mutable_data_ptr());
    at::parallel_for(0, rows, rows_per_task(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        apply_relu_bits(bits + r * row_bytes, g_ptr + r * cols, out_ptr + r * cols, cols);
      }
    });
  });
  return grad_in;
}

}  // namespace hypatia::ops
