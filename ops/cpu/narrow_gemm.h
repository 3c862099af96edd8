#pragma once
// out = act(x @ w.T + b) for narrow float32 layers (in and out features <= 256) by a
// register-tiled AVX2/FMA kernel: the bias is each accumulator's start and the ReLU is applied in
// registers, so a row block's output is written once and the x rows are read in place, where BLAS
// packs them first and the bias and ReLU take passes of their own (the difference is measured by
// docs/perf/experiments.md#narrow-fp32-avx2-kernel). Pure C++ on raw pointers:
// narrow_gemm_avx2.cpp is compiled with -mavx2 -mfma and must share no inline code with the rest of
// the library, which runs on CPUs without them.
#include <cstdint>

namespace hypatia::ops {

// In features (a short strip's zero-padded x rows live on the stack) and out features. Wider layers
// stay with MKL or oneDNN, whose rate rises with the size while this kernel packs the weight on every call.
constexpr int64_t kNarrowGemmMaxIn = 256;
constexpr int64_t kNarrowGemmMaxOut = 256;
constexpr int64_t kNarrowGemmPanel = 16;  // output columns per packed panel

// Whether this CPU runs the kernel (AVX2 and FMA), asked once; in ops/cpu/linear_act_cpu.cpp.
bool narrow_gemm_supported();

// Floats that pack_narrow_weight writes for a [n, k] weight: ceil(n / 16) panels of [k, 16].
inline int64_t narrow_packed_floats(int64_t n, int64_t k) {
  return (n + kNarrowGemmPanel - 1) / kNarrowGemmPanel * k * kNarrowGemmPanel;
}

// w [n, k] (row stride ldw) into `packed`: panel p holds w[16p .. 16p + 15, :] transposed, columns
// past n zero.
void pack_narrow_weight(const float* w, int64_t ldw, int64_t n, int64_t k, float* packed);

// out[r, :n] = act(x[r, :k] @ w.T + bias) for r in [0, rows); x and out rows `ldx` and `ldo` floats
// apart; bias may be null. relu keeps NaN, as torch.relu does.
void narrow_gemm_act(
    const float* x, int64_t ldx, int64_t rows, int64_t k, const float* packed, const float* bias, int64_t n,
    bool relu, float* out, int64_t ldo);

}  // namespace hypatia::ops
