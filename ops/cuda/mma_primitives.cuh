// Device primitives of the tensor-core kernels (narrow_mlp_kernel.cu, skinny_linear_kernel.cu,
// medium_mlp_kernel.cu):
// conversions between float and the 16-bit storage dtypes, mma.sync, ldmatrix and cp.async.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace hypatia::ops {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
// v rounded to nearest in the storage dtype (the tag's type).
__device__ __forceinline__ float rounded(float v, float) { return v; }
__device__ __forceinline__ __half rounded(float v, __half) { return __float2half_rn(v); }
__device__ __forceinline__ __nv_bfloat16 rounded(float v, __nv_bfloat16) { return __float2bfloat16_rn(v); }
template <typename T>
__device__ __forceinline__ void store_rounded(T* to, float v) {
  *to = rounded(v, T());
}

// Two floats rounded to nearest into the storage dtype (one cvt), `lo` at the lower address.
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __half) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __nv_bfloat16) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// ReLU of a packed pair, NaN kept as torch.relu keeps it (max.NaN). Applied after the rounding,
// with which it commutes.
__device__ __forceinline__ uint32_t relu2(uint32_t v, __half) {
  const __half2 r = __hmax2_nan(*reinterpret_cast<const __half2*>(&v), __float2half2_rn(0.f));
  return *reinterpret_cast<const uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t relu2(uint32_t v, __nv_bfloat16) {
  const __nv_bfloat162 r = __hmax2_nan(*reinterpret_cast<const __nv_bfloat162*>(&v), __float2bfloat162_rn(0.f));
  return *reinterpret_cast<const uint32_t*>(&r);
}
// pack2 and relu2 in one cvt (NaN stays NaN, as relu2 keeps it).
__device__ __forceinline__ uint32_t pack2_relu(float lo, float hi, __half) {
  uint32_t d;
  asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ uint32_t pack2_relu(float lo, float hi, __nv_bfloat16) {
  uint32_t d;
  asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
// 0xffff in each half of a packed pair whose value is > 0 or NaN, 0 in the others: where eager's
// ReLU backward (threshold_backward at 0) keeps the gradient.
__device__ __forceinline__ uint32_t above_zero_or_nan2(uint32_t v, __half) {
  return __hgtu2_mask(*reinterpret_cast<const __half2*>(&v), __float2half2_rn(0.f));
}
__device__ __forceinline__ uint32_t above_zero_or_nan2(uint32_t v, __nv_bfloat16) {
  return __hgtu2_mask(*reinterpret_cast<const __nv_bfloat162*>(&v), __float2bfloat162_rn(0.f));
}
__device__ __forceinline__ float2 unpack2(uint32_t v, __half) {
  return make_float2(to_float(__ushort_as_half(uint16_t(v))), to_float(__ushort_as_half(uint16_t(v >> 16))));
}
__device__ __forceinline__ float2 unpack2(uint32_t v, __nv_bfloat16) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}

// d = a @ b + c for one 16x8x16 tile: a as 4 registers of element pairs (rows g and g+8, columns
// 2t.. and 2t+8..), b as 2 (rows 2t.. and 2t+8.., column g), c and d as rows g and g+8, columns
// 2t, 2t+1 (g = lane / 4, t = lane % 4).
__device__ __forceinline__ void mma(
    float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, const float (&c)[4], __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ __forceinline__ void mma(
    float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, const float (&c)[4], __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// Four 8x8 matrices of 16-bit elements from shared memory; lanes 8i..8i+7 give the row addresses
// of matrix i. Lane l receives, of each matrix, row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (or,
// transposed, rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// 16 bytes from global to shared memory, asynchronously; zeros where !valid (src is then not
// read, but must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned dst_addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_addr), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `kPending` of this thread's newest commit groups are still in flight.
template <int kPending = 0>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace hypatia::ops
