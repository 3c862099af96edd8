#pragma once
// out = act(x @ w.T + b) for narrow float32 layers (in and out features <= 256) by a
// register-tiled AVX2/FMA kernel: the bias is each accumulator's start and the ReLU is applied in
// registers, so a row block's output is written once and the x rows are read in place, where BLAS
// packs them first and the bias and ReLU take passes of their own (the difference is measured by
// docs/perf/cpu-2026-11-23-edf0600/narrow-ab.py). Pure C++ on raw pointers: narrow_gemm_avx2.cpp is compiled
// with -mavx2 -mfma and must share no inline code with the rest of the library, which runs on CPUs
// without them.
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

// The same for bfloat16 layers where oneDNN's GEMM is native bfloat16 (AVX-512 BF16): there a
// layer is not computed in float32 (eager's is not), and this kernel is what a narrow one runs
// instead of a oneDNN call per row block (ops/cpu/narrow_gemm_avx512bf16.cpp; measured in
// docs/perf/cpu-2026-11-24-avx512-bf16-kernel/). Operands are bfloat16 bits; products summed in fp32, the bias
// (fp32) first, rounded once to bfloat16.
bool narrow_gemm_bf16_supported();

// Elements that pack_narrow_weight_bf16 writes for a [n, k] weight: ceil(n / 16) panels of
// ceil(k / 2) pairs of rows of k, each pair's 16 columns interleaved (k, k + 1), as vdpbf16ps reads them.
inline int64_t narrow_packed_bf16_elements(int64_t n, int64_t k) {
  return (n + kNarrowGemmPanel - 1) / kNarrowGemmPanel * ((k + 1) / 2) * 2 * kNarrowGemmPanel;
}

void pack_narrow_weight_bf16(const uint16_t* w, int64_t ldw, int64_t n, int64_t k, uint16_t* packed);

void narrow_gemm_act_bf16(
    const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, const uint16_t* packed, const float* bias, int64_t n,
    bool relu, uint16_t* out, int64_t ldo);

// The weight and bias gradients of a narrow bfloat16 layer in one pass over its rows, where oneDNN
// takes two (its GEMM, then a sum): sums[i][j] += sum over rows r of g[r][i] h[r][j] (i < n, j < k)
// and bias_sums[i] += sum over r of g[r][i] (when bias_sums is not null), in fp32 by vdpbf16ps over
// pairs of rows. g [rows, n] and h [rows, k] are bfloat16 bits, rows ldg / ldh apart. sums has
// narrow_grad_padded(n) rows of ld_sums >= narrow_grad_padded(k) floats; bias_sums
// narrow_grad_padded(n) floats; scratch narrow_weight_grad_scratch_elements(n, k) elements.
inline int64_t narrow_grad_padded(int64_t features) {
  return (features + kNarrowGemmPanel - 1) / kNarrowGemmPanel * kNarrowGemmPanel;
}
constexpr int64_t kNarrowGradChunkRows = 256;  // rows packed at a time: both packs stay in L2
inline int64_t narrow_weight_grad_scratch_elements(int64_t n, int64_t k) {
  return kNarrowGradChunkRows * (narrow_grad_padded(n) + narrow_grad_padded(k));
}
void narrow_weight_grad_bf16(
    const uint16_t* g, int64_t ldg, const uint16_t* h, int64_t ldh, int64_t rows, int64_t n, int64_t k, float* sums,
    int64_t ld_sums, float* bias_sums, uint16_t* scratch);

}  // namespace hypatia::ops
