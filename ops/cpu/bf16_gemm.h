#pragma once
// The library's bfloat16 GEMM for CPUs with AVX-512 BF16 and no AMX, where oneDNN's GEMM (eager's)
// runs the same vdpbf16ps instruction: out = act(x @ w.T + bias) with the bias as each fp32
// accumulator's start and the ReLU in registers, the output written once. On a 2-core AMD EPYC it
// ran wide layers at 90-95% of the instruction's peak against oneDNN's 78-87%
// (docs/perf/experiments.md#cpu-bf16-gemm-at-every-width); narrow ones gain from the fused bias and ReLU
// (docs/perf/experiments.md#narrow-bf16-avx-512-kernel), their GEMM alone slower than oneDNN's. Operands
// are bfloat16 bits, products summed in fp32 and rounded once to bfloat16. Pure C++ on raw
// pointers: bf16_gemm_avx512.cpp is compiled with AVX-512 flags and must share no inline code with
// the rest of the library.
#include <cstdint>

namespace hypatia::ops {

// Whether this CPU runs the kernel, asked once; in ops/cpu/linear_act_cpu.cpp.
bool bf16_gemm_supported();

constexpr int64_t kBf16GemmPanel = 16;  // output columns per packed panel

inline int64_t bf16_gemm_panels(int64_t n) {
  return (n + kBf16GemmPanel - 1) / kBf16GemmPanel;
}

// Elements that pack_bf16_weight writes for n output and k input features: ceil(n / 16) panels of
// ceil(k / 2) pairs, each pair's 16 columns interleaved (k, k + 1), as vdpbf16ps reads them.
inline int64_t bf16_packed_elements(int64_t n, int64_t k) {
  return bf16_gemm_panels(n) * ((k + 1) / 2) * 2 * kBf16GemmPanel;
}

// Panels [first_panel, end_panel) of the weight for n output and k input features into `packed`
// (bf16_packed_elements(n, k) elements, 64-byte aligned as ATen's CPU allocations; columns and pairs
// past n and k zero). The weight is w[c * ld + i] for output feature c and input feature i, as a
// Linear's [n, k] weight; or, when `inputs_major`, w[i * ld + c], as the [k, n] weight of a Linear
// whose input gradient this computes.
void pack_bf16_weight(const uint16_t* w, int64_t ld, bool inputs_major, int64_t n, int64_t k, int64_t first_panel,
                      int64_t end_panel, uint16_t* packed);

// What bf16_gemm_act does to each output row r's fp32 sums, in this order; each pointer may be null.
struct Bf16Epilogue {
  const float* bias = nullptr;  // [n], added
  bool relu = false;            // keeps NaN, as torch.relu does
  // Rounded to bfloat16, then zeroed where relu_out[r * ld_relu_out + c] <= 0: the gradient through
  // a ReLU whose saved output that is, as threshold_backward computes it.
  const uint16_t* relu_out = nullptr;
  int64_t ld_relu_out = 0;
  float* column_sums = nullptr;  // [n], += the stored outputs' sum over the rows (a bias gradient)
};

// out[r, :n] = epilogue(x[r, :k] @ w.T) for r in [0, rows), w as pack_bf16_weight packed it; x and
// out rows `ldx` and `ldo` elements apart.
void bf16_gemm_act(const uint16_t* x, int64_t ldx, int64_t rows, int64_t k, const uint16_t* packed, int64_t n,
                   const Bf16Epilogue& epilogue, uint16_t* out, int64_t ldo);

// The weight and bias gradients of a narrow bfloat16 layer in one pass over its rows, where oneDNN
// takes two (its GEMM, then a sum): sums[i][j] += sum over rows r of g[r][i] h[r][j] (i < n, j < k)
// and bias_sums[i] += sum over r of g[r][i] (when bias_sums is not null), in fp32 by vdpbf16ps over
// pairs of rows. g [rows, n] and h [rows, k] are bfloat16 bits, rows ldg / ldh apart. sums has
// bf16_grad_padded(n) rows of ld_sums >= bf16_grad_padded(k) floats; bias_sums
// bf16_grad_padded(n) floats; scratch narrow_weight_grad_scratch_elements(n, k) elements.
constexpr int64_t kNarrowGradMaxFeatures = 256;  // the sums of wider layers would leave L2
inline int64_t bf16_grad_padded(int64_t features) {  // rows and columns of a weight gradient's fp32 sums
  return bf16_gemm_panels(features) * kBf16GemmPanel;
}
constexpr int64_t kNarrowGradChunkRows = 256;  // rows packed at a time: both packs stay in L2
inline int64_t narrow_weight_grad_scratch_elements(int64_t n, int64_t k) {
  return kNarrowGradChunkRows * (bf16_grad_padded(n) + bf16_grad_padded(k));
}
void narrow_weight_grad_bf16(
    const uint16_t* g, int64_t ldg, const uint16_t* h, int64_t ldh, int64_t rows, int64_t n, int64_t k, float* sums,
    int64_t ld_sums, float* bias_sums, uint16_t* scratch);

// The wide weight-gradient kernel's output tile columns: its output is best split at multiples of it.
constexpr int64_t kWideGradTileCols = 64;

// The weight gradient of a wide bfloat16 layer: from 4096 rows it ran at 80-90% of the
// instruction's peak against oneDNN's GEMM (eager's) at 73-85%
// (docs/perf/experiments.md#bf16-weight-gradient-kernel). sums[i][j] = sum over rows r of g[r][i] h[r][j]
// (i < n, j < k), in fp32 by vdpbf16ps over pairs of rows, overwriting sums (bf16_grad_padded(n)
// rows of ld_sums >= bf16_grad_padded(k) floats; the padding gets zeros), or adding to them when
// `accumulate`. g [rows, n] and h [rows, k] are bfloat16 bits, rows ldg / ldh apart; scratch
// wide_weight_grad_scratch_elements(n, k) elements.
int64_t wide_weight_grad_scratch_elements(int64_t n, int64_t k);
void wide_weight_grad_bf16(const uint16_t* g, int64_t ldg, const uint16_t* h, int64_t ldh, int64_t rows, int64_t n,
                           int64_t k, float* sums, int64_t ld_sums, bool accumulate, uint16_t* scratch);

}  // namespace hypatia::ops
