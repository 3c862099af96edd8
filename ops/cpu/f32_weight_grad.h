#pragma once
// The weight gradient g.T @ h of wide float32 layers by the library's AVX-512 kernel, for AMD CPUs,
// where MKL's sgemm (eager's) runs AVX2 code: on a 2-core AMD EPYC (Zen 4) it ran at 80-90% of one
// core's FMA peak against MKL's 67-83% (docs/perf/experiments.md#fp32-weight-gradient-kernel).
// Pure C++ on raw pointers: f32_weight_grad_avx512.cpp is compiled with AVX-512 flags and must share
// no inline code with the rest of the library.
#include <cstdint>

namespace hypatia::ops {

// Whether this CPU runs the kernel, asked once; in ops/cpu/linear_act_cpu.cpp.
bool f32_weight_grad_supported();

// The kernel's output tile: a block's rows and columns are best split at multiples of these.
constexpr int64_t kF32GradTileRows = 6;
constexpr int64_t kF32GradTileCols = 64;

// Floats of scratch that weight_grad_f32 needs for an output block of n x k.
int64_t weight_grad_f32_scratch_elements(int64_t n, int64_t k);

// out[i * ldo + j] (+)= sum over r in [0, rows) of g[r * ldg + i] * h[r * ldh + j], for i in [0, n)
// and j in [0, k): one output block, summed in fp32 over chunks of rows, added to out where
// `accumulate`. g and h are [rows, *] float32 with unit column stride.
void weight_grad_f32(const float* g, int64_t ldg, const float* h, int64_t ldh, int64_t rows, int64_t n, int64_t k,
                     float* out, int64_t ldo, bool accumulate, float* scratch);

}  // namespace hypatia::ops
