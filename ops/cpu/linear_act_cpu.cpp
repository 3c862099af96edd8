// CPU: act(x @ w.T + b) by row blocks: narrow float32 layers (and widened half-precision ones) by
// the AVX2 kernel of narrow_gemm.h, native bfloat16 ones by the AVX-512 BF16 kernel of bf16_gemm.h,
// bias and ReLU in their registers; the others with one GEMM per block (oneDNN's inner product or
// ATen's BLAS, whichever is faster here: below) and the ReLU applied to each block straight after
// it, while the block is still in cache.
#include "ops/cpu/bf16_gemm.h"
#include "ops/cpu/buffer_cache.h"
#include "ops/cpu/cpu_layer.h"
#include "ops/cpu/f32_weight_grad.h"
#include "ops/cpu/narrow_gemm.h"
#include "ops/cpu/relu_bits.h"
#include "ops/cpu/row_blocks.h"

#include "ops/checks.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/Parallel.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/threshold_backward.h>
#include <ATen/ops/zeros.h>
#include <ATen/core/stack.h>
#include <ATen/cpu/Utils.h>

#include <algorithm>
#include <optional>

namespace hypatia::ops {
namespace {

// Whether oneDNN has native half-precision dot products (AVX512-BF16/FP16, AMX) on this CPU.
bool native_half_gemm(at::ScalarType dtype) {
  auto ask = [](const char* op) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(op, "").typed<bool()>().call();
  };
  static const bool bf16 = ask("mkldnn::_is_mkldnn_bf16_supported");
  static const bool fp16 = ask("mkldnn::_is_mkldnn_fp16_supported");
  return dtype == at::kBFloat16 ? bf16 : fp16;
}

// A float32 layer with at least this many in-features and multiply-adds is compute-bound enough
// that one oneDNN inner product over all rows beats row blocks: the output pass that the blocks
// keep in cache is a small part of such a GEMM. Measured on a 2-core AVX2 AMD EPYC: oneDNN's JIT
// GEMM ran 1.0-1.3x MKL's sgemm (which eager uses) from 2^28 multiply-adds up (1024x512->1024,
// 1024x784->2048, 4096x1024->4096) and 0.91-0.96x below 2^26 (256x256->512, 512x256->512).
constexpr int64_t kMinOnednnInFeatures = 256;
constexpr int64_t kMinOnednnMacs = int64_t(1) << 27;

// Whether the row blocks of the other float32 layers take oneDNN too: on AMD CPUs with AVX-512,
// where MKL's sgemm runs AVX2 code. On a 2-core AMD EPYC with AVX-512 oneDNN beat it at every block
// measured from 256x256->512 to 1024x4096->1024, 1.07-1.27x with the weight packed (0.99-1.21x
// dense; fused_mlp 8192x1024-4096 float32 forward: 1.07-1.09x eager by MKL blocks, 1.22-1.27x by
// oneDNN's); on the GPU machine's Xeon it gained nothing consistent (0.84-1.19x MKL).
// docs/perf/experiments.md#onednn-for-row-blocks has the numbers.
bool onednn_float32_blocks() {
#if defined(__x86_64__)
  static const bool amd_avx512 = __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f");
  return amd_avx512;
#else
  return false;
#endif
}

// A narrow float32 layer's forward takes the AVX2 kernel, its weight packed a call, from one row
// per this many weight elements: below, the packing costs more than the kernel gains over addmm and
// a ReLU pass (2-core AMD EPYC, one thread: 64-wide MLP layers gained from 4 rows, 256-wide from
// about 64; docs/perf/experiments.md#onednn-for-small-row-blocks).
constexpr int64_t kNarrowPackElementsPerRow = 1024;

// Whether a float32 block of `rows` rows through an [out, in] weight runs faster by oneDNN's inner
// product than by MKL's addmm on such CPUs. Measured on the 2-core AMD EPYC (1 and 2 threads,
// docs/perf/experiments.md#onednn-for-small-row-blocks): from 256 rows oneDNN wins or ties at every
// shape; on weights of 2^18 elements or more also from 64 rows and at 4-15, but it ran 1.2-4x
// slower at 16-32 rows of those and 1.4x at one row of a 256 x 1024 one, and up to 2x slower below
// 256 rows of smaller ones.
bool onednn_float32_block_pays(int64_t rows, int64_t in_features, int64_t out_features) {
  const bool wide = in_features * out_features >= (int64_t(1) << 18);
  return rows >= 256 || (wide && (rows >= 64 || (rows >= 4 && rows < 16)));
}

// PyTorch's oneDNN linear ops, absent where it was built without oneDNN. Called boxed: the schemas
// are the contract here, not the C++ signatures of ATen's kernels.
const std::optional<c10::OperatorHandle>& onednn_linear_op() {
  static const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
  return op;
}
const std::optional<c10::OperatorHandle>& onednn_reorder_op() {
  static const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_reorder_linear_weight", ""});
  return op;
}
bool has_onednn() {
  return onednn_linear_op() && onednn_reorder_op();
}

// x2d @ w.T + b by oneDNN's inner product (mkldnn::_linear_pointwise, the op behind
// torch.compile's CPU linear fusions); w [N, K] contiguous, or the transposed view of a contiguous
// [K, N] (oneDNN reads its strides), or packed by onednn_packed_weight. Its ReLU post-op is not used:
// it turns NaN into 0, where torch.relu keeps it.
at::Tensor onednn_linear(const at::Tensor& x2d, const at::Tensor& w, const OptionalTensor& b) {
  torch::jit::Stack stack{
      x2d.contiguous(), w, b ? c10::IValue(b->contiguous()) : c10::IValue(), c10::IValue("none"),
      c10::IValue(c10::List<std::optional<c10::Scalar>>()), c10::IValue()};
  onednn_linear_op()->callBoxed(&stack);
  return stack.front().toTensor();
}

// w [N, K] in oneDNN's own blocked layout for `rows`-row inner products: row blocks that share it
// skip the reorder that each call with a dense weight makes (1-7% of a 1024-row block's GEMM on the
// EPYC, 17-37% of a bfloat16 one's on the Xeon's AMX).
at::Tensor onednn_packed_weight(const at::Tensor& w, int64_t rows) {
  torch::jit::Stack stack{w.contiguous(), c10::IValue(rows)};
  onednn_reorder_op()->callBoxed(&stack);
  return stack.front().toTensor();
}

// dst = torch.relu(src) (dst may be src), by the AVX-512 pass where the CPU has it and the
// tensors are dense and of one dtype (ATen's bfloat16 relu converts each element to float and
// back), else by ATen's relu, clamp_min (NaN stays NaN, as in eager).
void relu_into(const at::Tensor& src, at::Tensor& dst) {
#if defined(HYPATIA_WITH_AVX512_RELU_BITS)
  const std::optional<ReluBitsElement> element = relu_bits_element(src.scalar_type());
  if (element && relu_bits_avx512_supported() && src.is_contiguous() && dst.is_contiguous() &&
      dst.scalar_type() == src.scalar_type()) {
    const auto* in = static_cast<const char*>(src.const_data_ptr());
    auto* out = static_cast<char*>(dst.mutable_data_ptr());
    const int64_t size = src.element_size();
    at::parallel_for(0, src.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      relu_avx512(in + begin * size, out + begin * size, end - begin, *element);
    });
    return;
  }
#endif
  if (src.is_same(dst)) {
    at::relu_(dst);
  } else {
    at::clamp_min_out(dst, src, 0);
  }
}

// Per-thread fp32 column sums (one row a thread, zeros; run_bf16_gemm adds to them), and their
// total rounded once to `dtype`, as ATen's sum rounds its fp32 accumulator: a bias gradient.
at::Tensor new_column_sums(int64_t n, const at::TensorOptions& options) {
  return at::zeros({at::get_num_threads(), n}, options.dtype(at::kFloat));
}
at::Tensor column_sums_total(const at::Tensor& sums, at::ScalarType dtype) {
  return sums.sum(0).to(dtype);
}

// The [n, k] weight gradient from its fp32 sums (padded or not), rounded once to `dtype`, as oneDNN's
// GEMM rounds.
at::Tensor weight_grad_from_sums(const at::Tensor& sums, int64_t n, int64_t k, at::ScalarType dtype) {
  return sums.narrow(0, 0, n).narrow(1, 0, k).to(dtype);
}

#ifdef HYPATIA_WITH_AVX512BF16_GEMM
// Whether a bfloat16 layer of n x k features over `rows` rows runs the library's kernel: where the
// CPU has it and the rows pay for packing the weight on every call. On the EPYC
// (docs/perf/experiments.md#cpu-bf16-gemm-at-every-width) a weight that fits in L2 paid from 8 rows
// (256x256->512: 1.42x / 1.06x eager at 1 / 2 threads); larger ones (packing 8 MiB: 1.0-1.4 ms)
// ran 0.53-0.92x eager up to 128 rows, 0.97-1.29x at 512 and 1.05-1.28x at 2048.
constexpr int64_t kBf16GemmSmallWeight = int64_t(1) << 18;  // elements: 512 KiB
constexpr int64_t kMinBf16GemmRows = 512;
constexpr int64_t kMinBf16InputGradWeight = int64_t(1) << 20;  // elements (cpu_input_grad)

bool bf16_gemm_pays(int64_t rows, int64_t n, int64_t k) {
  return rows > 0 && n > 0 && k > 0 && (rows >= kMinBf16GemmRows || n * k <= kBf16GemmSmallWeight) &&
      bf16_gemm_supported();
}

// A bfloat16 weight packed by pack_bf16_weight, its panels spread over the threads: w is [n, k], or
// [k, n] when inputs_major.
at::Tensor packed_bf16_weight(const at::Tensor& w, bool inputs_major) {
  const int64_t n = w.size(inputs_major ? 1 : 0), k = w.size(inputs_major ? 0 : 1);
  at::Tensor packed = at::empty({bf16_packed_elements(n, k)}, w.options());
  const auto* bits = static_cast<const uint16_t*>(w.const_data_ptr());
  auto* out = static_cast<uint16_t*>(packed.data_ptr());
  TORCH_INTERNAL_ASSERT(reinterpret_cast<uintptr_t>(out) % 64 == 0, "pack_bf16_weight streams 64-byte vectors");
  at::parallel_for(0, bf16_gemm_panels(n), 1, [&](int64_t begin, int64_t end) {
    pack_bf16_weight(bits, w.stride(0), inputs_major, n, k, begin, end, out);
  });
  return packed;
}

// out = epilogue(x @ w.T) by bf16_gemm_act, x's rows spread over the threads (inline inside a
// parallel task); `epilogue` points at row 0 and has no column_sums. With column_sums ([threads, n]
// fp32 zeros), each thread adds its rows' column sums of out to its own row of them.
void run_bf16_gemm(const at::Tensor& x, const at::Tensor& packed, const Bf16Epilogue& epilogue, at::Tensor& out,
                   const at::Tensor& column_sums = {}) {
  const at::Tensor x_rows = with_unit_column_stride(x);
  const int64_t k = x_rows.size(1), n = out.size(1);
  const auto* x_bits = static_cast<const uint16_t*>(x_rows.const_data_ptr());
  auto* out_bits = static_cast<uint16_t*>(out.data_ptr());
  at::parallel_for(0, x_rows.size(0), rows_per_gemm_task(n * k), [&](int64_t begin, int64_t end) {
    Bf16Epilogue e = epilogue;
    e.relu_out = e.relu_out ? e.relu_out + begin * e.ld_relu_out : nullptr;
    e.column_sums = column_sums.defined() ? column_sums.data_ptr<float>() + at::get_thread_num() * n : nullptr;
    bf16_gemm_act(x_bits + begin * x_rows.stride(0), x_rows.stride(0), end - begin, k,
                  static_cast<const uint16_t*>(packed.const_data_ptr()), n, e, out_bits + begin * out.stride(0),
                  out.stride(0));
  });
}

// out = grad2d @ w (w packed inputs-major), rounded to bfloat16 and zeroed where relu_out2d <= 0, as
// threshold_backward; its column sums added to column_sums (new_column_sums) where that is defined.
void run_bf16_relu_input_grad(const at::Tensor& grad2d, const at::Tensor& packed, const at::Tensor& relu_out2d,
                              at::Tensor& out, const at::Tensor& column_sums) {
  const at::Tensor saved = with_unit_column_stride(relu_out2d);
  Bf16Epilogue epilogue;
  epilogue.relu_out = static_cast<const uint16_t*>(saved.const_data_ptr());
  epilogue.ld_relu_out = saved.stride(0);
  run_bf16_gemm(grad2d, packed, epilogue, out, column_sums);
}

// Whether cpu_input_grad takes the library's bfloat16 kernel for grad2d @ w: on the EPYC it ran
// 1.00-1.12x oneDNN's mm from 2048x784 weights up, but 0.44-0.99x up to 512x256, where the forward
// gains from its epilogue alone (docs/perf/experiments.md#cpu-bf16-gemm-at-every-width).
bool bf16_input_grad_pays(const at::Tensor& grad2d, const at::Tensor& w) {
  return grad2d.scalar_type() == at::kBFloat16 && w.size(0) * w.size(1) >= kMinBf16InputGradWeight &&
      bf16_gemm_pays(grad2d.size(0), w.size(1), w.size(0));
}

// cpu_weight_grads by narrow_weight_grad_bf16: one task per thread over whole chunks of rows, each
// summing into its own fp32 buffers, added in task order and rounded once to bfloat16, as oneDNN's
// GEMM and ATen's sum round theirs.
std::pair<at::Tensor, at::Tensor> narrow_weight_grads_bf16(
    const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad) {
  const at::Tensor g = with_unit_column_stride(grad2d);
  const at::Tensor h = with_unit_column_stride(h2d);
  const int64_t rows = g.size(0), n = g.size(1), k = h.size(1);
  const int64_t padded_n = bf16_grad_padded(n), padded_k = bf16_grad_padded(k);
  const int64_t chunks = (rows + kNarrowGradChunkRows - 1) / kNarrowGradChunkRows;
  const int64_t tasks = reduction_tasks(chunks);
  const at::Tensor sums = at::zeros({tasks, padded_n * padded_k + padded_n}, g.options().dtype(at::kFloat));
  const auto* g_bits = static_cast<const uint16_t*>(g.const_data_ptr());
  const auto* h_bits = static_cast<const uint16_t*>(h.const_data_ptr());
  for_each_reduction_task(tasks, chunks, [&](int64_t t, int64_t first_chunk, int64_t end_chunk) {
    const at::Tensor scratch = at::empty({narrow_weight_grad_scratch_elements(n, k)}, g.options());
    const int64_t first = first_chunk * kNarrowGradChunkRows;
    const int64_t last = std::min(rows, end_chunk * kNarrowGradChunkRows);
    float* task_sums = sums.data_ptr<float>() + t * sums.size(1);
    float* task_bias_sums = bias_grad ? task_sums + padded_n * padded_k : nullptr;
    narrow_weight_grad_bf16(g_bits + first * g.stride(0), g.stride(0), h_bits + first * h.stride(0), h.stride(0),
                            last - first, n, k, task_sums, padded_k, task_bias_sums,
                            static_cast<uint16_t*>(scratch.data_ptr()));
  });
  const at::Tensor total = sums[0];
  for (int64_t t = 1; t < tasks; ++t) {
    total.add_(sums[t]);
  }
  at::Tensor weight = total.narrow(0, 0, padded_n * padded_k).view({padded_n, padded_k});
  weight = weight.narrow(0, 0, n).narrow(1, 0, k).to(at::kBFloat16);
  at::Tensor bias = bias_grad ? total.narrow(0, padded_n * padded_k, n).to(at::kBFloat16) : at::Tensor();
  return {std::move(weight), std::move(bias)};
}
#endif

// Where cpu_weight_grads takes the library's kernels for wide layers, measured on the EPYC: float32
// against MKL's mm (docs/perf/experiments.md#fp32-weight-gradient-kernel); bfloat16 against oneDNN's
// (docs/perf/experiments.md#bf16-weight-gradient-kernel), where from 4096 rows it ran 1.02-1.11x oneDNN's mm
// alone and at 1024 rows, packing both operands, within the noise of it.
constexpr int64_t kMinWideWeightGradElements = int64_t(1) << 20;
constexpr int64_t kMinF32WeightGradRows = 1024;
constexpr int64_t kMinBf16WeightGradRows = 4096;

// fn(i, slice_n, j, slice_k) for the output block [i, i + slice_n) x [j, j + slice_k) of a weight
// gradient [n, k], one task a thread: slices of its rows (whole `row_unit`s) where g is the wider
// operand, else of its columns (`col_unit`s), so that each task packs only its own slice of the
// wider one.
template <typename Fn>
void for_each_output_slice(int64_t n, int64_t k, int64_t row_unit, int64_t col_unit, const Fn& fn) {
  const bool split_rows = n >= k;
  const int64_t extent = split_rows ? n : k, unit = split_rows ? row_unit : col_unit;
  const int64_t units = (extent + unit - 1) / unit;
  for_each_reduction_task(reduction_tasks(units), units, [&](int64_t, int64_t first_unit, int64_t end_unit) {
    const int64_t begin = first_unit * unit, end = std::min(extent, end_unit * unit);
    if (split_rows) {
      fn(begin, end - begin, int64_t(0), k);
    } else {
      fn(int64_t(0), n, begin, end - begin);
    }
  });
}

#ifdef HYPATIA_WITH_AVX512_F32_WEIGHT_GRAD
// sums (float32 [n, k], contiguous) = g.T @ h by weight_grad_f32, or += when `accumulate`.
void weight_grad_sums_f32(const at::Tensor& grad2d, const at::Tensor& h2d, const at::Tensor& sums, bool accumulate) {
  const at::Tensor g = with_unit_column_stride(grad2d);
  const at::Tensor h = with_unit_column_stride(h2d);
  const int64_t rows = g.size(0), n = g.size(1), k = h.size(1);
  for_each_output_slice(n, k, kF32GradTileRows, kF32GradTileCols, [&](int64_t i, int64_t slice_n, int64_t j,
                                                                      int64_t slice_k) {
    const at::Tensor scratch = at::empty({weight_grad_f32_scratch_elements(slice_n, slice_k)}, g.options());
    weight_grad_f32(g.const_data_ptr<float>() + i, g.stride(0), h.const_data_ptr<float>() + j, h.stride(0), rows,
                    slice_n, slice_k, sums.data_ptr<float>() + i * k + j, k, accumulate, scratch.data_ptr<float>());
  });
}

// cpu_weight_grads by weight_grad_f32; the bias gradient as ATen's.
std::pair<at::Tensor, at::Tensor> weight_grads_f32(const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad) {
  at::Tensor weight = at::empty({grad2d.size(1), h2d.size(1)}, grad2d.options());
  weight_grad_sums_f32(grad2d, h2d, weight, /*accumulate=*/false);
  return {std::move(weight), bias_grad ? grad2d.sum(0) : at::Tensor()};
}
#endif

#ifdef HYPATIA_WITH_AVX512BF16_GEMM
// sums (fp32 [bf16_grad_padded(n), bf16_grad_padded(k)]) = g.T @ h by wide_weight_grad_bf16, or +=
// when `accumulate`. Slices start at multiples of 16 rows, where the kernel's padded sums rows
// start, or of 64 columns.
void wide_weight_grad_sums_bf16(const at::Tensor& grad2d, const at::Tensor& h2d, const at::Tensor& sums,
                                bool accumulate) {
  const at::Tensor g = with_unit_column_stride(grad2d);
  const at::Tensor h = with_unit_column_stride(h2d);
  const int64_t rows = g.size(0), n = g.size(1), k = h.size(1), ld = sums.size(1);
  const auto* g_bits = static_cast<const uint16_t*>(g.const_data_ptr());
  const auto* h_bits = static_cast<const uint16_t*>(h.const_data_ptr());
  for_each_output_slice(n, k, kBf16GemmPanel, kWideGradTileCols, [&](int64_t i, int64_t slice_n, int64_t j,
                                                                      int64_t slice_k) {
    const at::Tensor scratch = at::empty({wide_weight_grad_scratch_elements(slice_n, slice_k)}, g.options());
    wide_weight_grad_bf16(g_bits + i, g.stride(0), h_bits + j, h.stride(0), rows, slice_n, slice_k,
                          sums.data_ptr<float>() + i * ld + j, ld, accumulate,
                          static_cast<uint16_t*>(scratch.data_ptr()));
  });
}

at::Tensor new_weight_grad_sums_bf16(int64_t n, int64_t k, const at::TensorOptions& options) {
  return at::empty({bf16_grad_padded(n), bf16_grad_padded(k)}, options.dtype(at::kFloat));
}

// cpu_weight_grads by wide_weight_grad_bf16; the bias gradient as ATen's.
std::pair<at::Tensor, at::Tensor> wide_weight_grads_bf16(
    const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad) {
  const int64_t n = grad2d.size(1), k = h2d.size(1);
  const at::Tensor sums = new_weight_grad_sums_bf16(n, k, grad2d.options());
  wide_weight_grad_sums_bf16(grad2d, h2d, sums, /*accumulate=*/false);
  return {weight_grad_from_sums(sums, n, k, at::kBFloat16), bias_grad ? grad2d.sum(0) : at::Tensor()};
}
#endif

}  // namespace

#ifdef HYPATIA_WITH_AVX512_F32_WEIGHT_GRAD
// On AMD CPUs with AVX-512 only, where MKL's sgemm (eager's) runs AVX2 code: on Intel ones MKL has
// its own AVX-512 kernels, not measured against this one.
bool f32_weight_grad_supported() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_is("amd");
  return supported;
}
#endif

#ifdef HYPATIA_WITH_AVX2_GEMM
// Here, not beside the kernels: code of their files may hold AVX2 or AVX-512 instructions.
bool narrow_gemm_supported() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}
#endif
#ifdef HYPATIA_WITH_AVX512BF16_GEMM
// Not where oneDNN's bfloat16 GEMM runs AMX tiles: on the GPU machine's Xeon this kernel took 9.0 ms
// for the 65536x64->64 training forward that eager's oneDNN GEMM, ReLU and copy did in 5.0
// (docs/perf/experiments.md#avx-512-mask-passes-and-row-blocks).
bool bf16_gemm_supported() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
      !at::cpu::get_cpu_capabilities().at("amx_bf16").toBool();
  return supported;
}
#endif

bool computes_widened(at::ScalarType dtype) {
  return at::isReducedFloatingType(dtype) && !native_half_gemm(dtype);
}

int64_t gemm_element_size(at::ScalarType dtype) {
  return computes_widened(dtype) ? int64_t(sizeof(float)) : int64_t(c10::elementSize(dtype));
}

CpuLayer prepare_cpu_layer(
    const at::Tensor& w, const OptionalTensor& b, bool relu, int64_t forward_rows, int64_t block_rows) {
  CpuLayer layer;
  layer.relu = relu;
  // Widened layers keep the fp32 accumulation and round once, when the block is stored.
  layer.widened = computes_widened(w.scalar_type());
  const bool has_bias = b.has_value() && b->defined();
  if (layer.widened) {
    layer.weight_t = w.to(at::kFloat).t();
    layer.bias = has_bias ? OptionalTensor(b->to(at::kFloat)) : std::nullopt;
  } else {
    layer.weight_t = w.t();
    layer.bias = has_bias ? b : std::nullopt;
  }
  const int64_t out_features = w.size(0), in_features = w.size(1);
  [[maybe_unused]] const bool narrow = forward_rows > 0 &&
      forward_rows * kNarrowPackElementsPerRow >= out_features * in_features &&
      out_features <= kNarrowGemmMaxOut && in_features <= kNarrowGemmMaxIn;
#ifdef HYPATIA_WITH_AVX512BF16_GEMM
  if (layer.weight_t.scalar_type() == at::kBFloat16 && bf16_gemm_pays(forward_rows, out_features, in_features)) {
    layer.packed = packed_bf16_weight(w.contiguous(), /*inputs_major=*/false);
    if (layer.bias) {
      layer.bias = layer.bias->to(at::kFloat).contiguous();
    }
  }
#endif
#ifdef HYPATIA_WITH_AVX2_GEMM
  if (narrow && layer.weight_t.scalar_type() == at::kFloat && narrow_gemm_supported()) {
    const at::Tensor w_float = layer.weight_t.t().contiguous();
    layer.packed = at::empty({narrow_packed_floats(out_features, in_features)}, w_float.options());
    pack_narrow_weight(
        w_float.data_ptr<float>(), in_features, out_features, in_features, layer.packed.data_ptr<float>());
    if (layer.bias) {
      layer.bias = layer.bias->contiguous();
    }
  }
#endif
  const at::ScalarType gemm_type = layer.weight_t.scalar_type();
  const bool shared_by_blocks = forward_rows > block_rows;
  // Native half precision already runs oneDNN (its matmul) through ATen, so it gains only where
  // row blocks share one packed weight.
  const bool onednn = (gemm_type == at::kFloat && onednn_float32_blocks() &&
                       onednn_float32_block_pays(std::min(forward_rows, block_rows), in_features, out_features)) ||
      (at::isReducedFloatingType(gemm_type) && shared_by_blocks);
  // oneDNN has no inner product over zero in-features.
  if (forward_rows > 0 && w.size(1) > 0 && !layer.packed.defined() && onednn && has_onednn()) {
    const at::Tensor w_gemm = layer.weight_t.t();
    layer.onednn_weight = shared_by_blocks ? onednn_packed_weight(w_gemm, block_rows) : w_gemm.contiguous();
  }
  return layer;
}

at::Tensor cpu_input_grad(const at::Tensor& grad2d, const at::Tensor& w) {
  // On the AMD EPYC, 8192-row gradients by [4096, 1024] and [1024, 4096] weights: 1.07-1.18x MKL's
  // mm (docs/perf/experiments.md#onednn-input-gradient); but fused_linear_relu 256x256->512
  // forward+backward lost 3-10% with it (the same entry), so only compute-bound ones. w.T goes as a
  // view: a contiguous copy of it was slower and, in an MLP's backward, raised the peak memory above
  // eager's. Not over zero out-features, where oneDNN has no inner product.
  const int64_t macs = grad2d.size(0) * w.size(0) * w.size(1);
#ifdef HYPATIA_WITH_AVX512BF16_GEMM
  // Wide bfloat16 ones by the library's kernel, as a layer of w.size(0) in and w.size(1) out features.
  if (bf16_input_grad_pays(grad2d, w)) {
    at::Tensor out = at::empty({grad2d.size(0), w.size(1)}, grad2d.options());
    run_bf16_gemm(grad2d, packed_bf16_weight(w.contiguous(), /*inputs_major=*/true), Bf16Epilogue{}, out);
    return out;
  }
#endif
  if (grad2d.scalar_type() == at::kFloat && onednn_float32_blocks() && w.size(0) > 0 && macs >= kMinOnednnMacs &&
      has_onednn()) {
    return onednn_linear(grad2d, w.t(), std::nullopt);
  }
  return grad2d.mm(w);
}

std::pair<at::Tensor, at::Tensor> cpu_relu_input_grad(
    const at::Tensor& grad2d, const at::Tensor& w, const at::Tensor& relu_out2d, bool bias_grad) {
#ifdef HYPATIA_WITH_AVX512BF16_GEMM
  // The ReLU's mask and the bias gradient in the kernel's epilogue, where relu_backward_and_bias_grad
  // takes two more passes over the [M, K] gradient. Not where autograd records the backward (a
  // double backward), which needs threshold_backward itself.
  if (!records_backward({grad2d, relu_out2d}) && relu_out2d.scalar_type() == at::kBFloat16 &&
      bf16_input_grad_pays(grad2d, w)) {
    at::Tensor out = at::empty({grad2d.size(0), w.size(1)}, grad2d.options());
    const at::Tensor sums = bias_grad ? new_column_sums(out.size(1), out.options()) : at::Tensor();
    run_bf16_relu_input_grad(grad2d, packed_bf16_weight(w.contiguous(), /*inputs_major=*/true), relu_out2d, out, sums);
    return {std::move(out), bias_grad ? column_sums_total(sums, at::kBFloat16) : at::Tensor()};
  }
#endif
  return relu_backward_and_bias_grad(cpu_input_grad(grad2d, w), relu_out2d, bias_grad);
}

namespace {

// The kernels of wide_mlp_backward for one dtype, on one chunk of rows.
struct WideBackwardKernels {
  // Small enough that a chunk's hidden gradient stays below glibc's 32 MiB mmap threshold (reused
  // without fresh pages) and in L3 between the GEMM that writes it and the two that read it.
  int64_t chunk_rows;
  // w [n, k] prepared for grad @ w over chunks of chunk_rows rows.
  at::Tensor (*pack)(const at::Tensor& w, int64_t chunk_rows);
  // next = grad @ w zeroed where relu_out <= 0 (threshold_backward), its column sums added to
  // bias_sums (new_column_sums) where that is defined.
  void (*relu_input_grad)(const at::Tensor& grad, const at::Tensor& packed, const at::Tensor& relu_out,
                          at::Tensor& next, const at::Tensor& bias_sums);
  // out = grad @ w.
  void (*input_grad)(const at::Tensor& grad, const at::Tensor& packed, at::Tensor& out);
  // fp32 sums for an [n, k] weight gradient (weight_grad_from_sums reads them), and
  // sums (+)= grad.T @ h.
  at::Tensor (*new_weight_sums)(int64_t n, int64_t k, const at::TensorOptions& options);
  void (*weight_sums)(const at::Tensor& grad, const at::Tensor& h, const at::Tensor& sums, bool accumulate);
};

#ifdef HYPATIA_WITH_AVX512BF16_GEMM
// The library's kernels, the mask and bias sums in the GEMM's epilogue; 1024-row chunks (8 MiB of
// hidden gradient at 4096 wide).
static_assert(kMinBf16InputGradWeight == kMinWideWeightGradElements, "wide_mlp_backward's one width test");
const WideBackwardKernels kBf16WideBackward{
    1024,
    [](const at::Tensor& w, int64_t) { return packed_bf16_weight(w.contiguous(), /*inputs_major=*/true); },
    run_bf16_relu_input_grad,
    [](const at::Tensor& grad, const at::Tensor& packed, at::Tensor& out) {
      run_bf16_gemm(grad, packed, Bf16Epilogue{}, out);
    },
    new_weight_grad_sums_bf16,
    wide_weight_grad_sums_bf16};
#endif

#ifdef HYPATIA_WITH_AVX512_F32_WEIGHT_GRAD
// oneDNN's inner product on weights it packed once for all chunks, and the library's weight
// gradient; 512-row chunks (8 MiB of hidden gradient at 4096 wide, as the bfloat16 ones). On the
// EPYC, fused_mlp 8192x1024-4096's backward ran 1.01-1.03x faster so than by the per-layer backward,
// whose input gradients write fresh 32-128 MiB tensors; forward+backward 1.02-1.03x at 1 thread,
// 1.00-1.01x at 2 (docs/perf/experiments.md#fp32-mlp-backward-in-row-chunks).
const WideBackwardKernels kF32WideBackward{
    512,
    [](const at::Tensor& w, int64_t chunk_rows) { return onednn_packed_weight(w.t(), chunk_rows); },
    [](const at::Tensor& grad, const at::Tensor& packed, const at::Tensor& relu_out, at::Tensor& next,
       const at::Tensor& bias_sums) {
      at::threshold_backward_out(next, onednn_linear(grad, packed, std::nullopt), relu_out, 0);
      if (bias_sums.defined()) {
        bias_sums[0].add_(next.sum(0));
      }
    },
    [](const at::Tensor& grad, const at::Tensor& packed, at::Tensor& out) {
      out.copy_(onednn_linear(grad, packed, std::nullopt));
    },
    [](int64_t n, int64_t k, const at::TensorOptions& options) { return at::empty({n, k}, options); },
    weight_grad_sums_f32};
#endif

// The kernels wide_mlp_backward takes for `rows` rows of `dtype` on this CPU, or none.
const WideBackwardKernels* wide_backward_kernels(at::ScalarType dtype, int64_t rows) {
#ifdef HYPATIA_WITH_AVX512BF16_GEMM
  if (dtype == at::kBFloat16 && rows >= kMinBf16WeightGradRows && bf16_gemm_supported()) {
    return &kBf16WideBackward;
  }
#endif
#ifdef HYPATIA_WITH_AVX512_F32_WEIGHT_GRAD
  if (dtype == at::kFloat && rows >= kMinF32WeightGradRows && f32_weight_grad_supported() &&
      onednn_float32_blocks() && has_onednn()) {
    return &kF32WideBackward;
  }
#endif
  return nullptr;
}

}  // namespace

std::optional<std::vector<at::Tensor>> wide_mlp_backward(
    const at::Tensor& grad_out, const at::Tensor& input, at::TensorList weights, at::TensorList saved_outputs,
    const c10::List<bool>& has_bias, bool relu_last, bool input_grad, bool params_grad) {
  const size_t depth = weights.size(), top = depth - 1;
  const int64_t rows = as_rows(input).size(0);
  const at::ScalarType dtype = input.scalar_type();
  const WideBackwardKernels* kernels = wide_backward_kernels(dtype, rows);
  // Not where autograd records the backward (a double backward): as cpu_relu_input_grad.
  const bool recorded = records_backward({grad_out}) || records_backward(saved_outputs);
  if (kernels == nullptr || depth < 2 || recorded) {
    return std::nullopt;
  }
  // Only where the per-layer backward would give every GEMM below the top layer to these kernels:
  // input and weight gradients from 2^20 weights. (A last bfloat16 chunk may be shorter than the 512
  // rows of bf16_gemm_pays, which weighs the packing paid once here.)
  for (size_t i = 0; i < depth; ++i) {
    const bool carries_gradient = i > 0 || input_grad, wide = weights[i].numel() >= kMinWideWeightGradElements;
    if (!wide && (carries_gradient || (i < top && params_grad))) {
      return std::nullopt;
    }
  }
  auto layer_input = [&](size_t i) { return as_rows(i == 0 ? input : saved_outputs[i - 1]).contiguous(); };
  std::vector<at::Tensor> grad_weights(depth), grad_biases(depth);
  at::Tensor grad = as_rows(grad_out).contiguous();
  if (relu_last) {
    grad = at::threshold_backward(grad, as_rows(saved_outputs[top]), 0);  // eager's ReLU backward
  }
  if (params_grad) {  // the top layer's gradients over all rows, as the per-layer backward
    at::Tensor summed;
    std::tie(grad_weights[top], summed) = cpu_weight_grads(grad, layer_input(top), has_bias.get(top));
    grad_biases[top] = summed;
  }
  // Below it, per layer: the packed weight, its input and saved output, fp32 weight-gradient sums and
  // per-thread bias sums, over all chunks.
  const int64_t chunk_rows = kernels->chunk_rows;
  std::vector<at::Tensor> packed(depth), inputs(depth), relu_outs(depth), sums(depth), bias_sums(depth);
  int64_t widest = 0;
  for (size_t i = 0; i < depth; ++i) {
    if (i > 0 || input_grad) {
      packed[i] = kernels->pack(weights[i], chunk_rows);
    }
    if (i == top) {
      continue;
    }
    const int64_t n = weights[i].size(0), k = weights[i].size(1);
    widest = std::max(widest, n);
    if (params_grad) {  // without, the saved input is a stand-in (shape_only)
      inputs[i] = layer_input(i);
    }
    relu_outs[i] = as_rows(saved_outputs[i]).contiguous();
    if (params_grad) {
      sums[i] = kernels->new_weight_sums(n, k, grad.options().dtype(at::kFloat));
      if (has_bias.get(i)) {
        bias_sums[i] = new_column_sums(n, grad.options());
      }
    }
  }
  at::Tensor grad_input = input_grad ? at::empty({rows, weights[0].size(1)}, grad.options()) : at::Tensor();
  const at::Tensor buffers = at::empty({2, chunk_rows * widest}, grad.options());
  for (int64_t r = 0; r < rows; r += chunk_rows) {
    const int64_t count = std::min(chunk_rows, rows - r);
    at::Tensor chunk_grad = grad.narrow(0, r, count);
    for (size_t i = top; i-- > 0;) {  // the gradient at layer i's output, through its ReLU
      const int64_t n = weights[i].size(0);
      at::Tensor next = buffers[i % 2].narrow(0, 0, count * n).view({count, n});
      kernels->relu_input_grad(chunk_grad, packed[i + 1], relu_outs[i].narrow(0, r, count), next, bias_sums[i]);
      if (params_grad) {
        kernels->weight_sums(next, inputs[i].narrow(0, r, count), sums[i], /*accumulate=*/r > 0);
      }
      chunk_grad = next;
    }
    if (input_grad) {
      at::Tensor rows_out = grad_input.narrow(0, r, count);
      kernels->input_grad(chunk_grad, packed[0], rows_out);
    }
  }
  for (size_t i = 0; i < top; ++i) {
    if (params_grad) {
      grad_weights[i] = weight_grad_from_sums(sums[i], weights[i].size(0), weights[i].size(1), dtype);
      if (has_bias.get(i)) {
        grad_biases[i] = column_sums_total(bias_sums[i], dtype);
      }
    }
  }
  return defined_grads({grad_weights, grad_biases, input_grad ? grad_input.view(input.sizes()) : at::Tensor()});
}

std::pair<at::Tensor, at::Tensor> cpu_weight_grads(const at::Tensor& grad2d, const at::Tensor& h2d, bool bias_grad) {
  const int64_t rows = grad2d.size(0), n = grad2d.size(1), k = h2d.size(1);
  [[maybe_unused]] const bool wide = n * k >= kMinWideWeightGradElements;
#ifdef HYPATIA_WITH_AVX512BF16_GEMM
  if (grad2d.scalar_type() == at::kBFloat16 && bf16_gemm_supported()) {
    // Narrow layers from one chunk of rows up: below it, the per-task buffers cost more than the
    // pass saves.
    if (n > 0 && k > 0 && n <= kNarrowGradMaxFeatures && k <= kNarrowGradMaxFeatures && rows >= kNarrowGradChunkRows) {
      return narrow_weight_grads_bf16(grad2d, h2d, bias_grad);
    }
    if (wide && rows >= kMinBf16WeightGradRows) {
      return wide_weight_grads_bf16(grad2d, h2d, bias_grad);
    }
  }
#endif
#ifdef HYPATIA_WITH_AVX512_F32_WEIGHT_GRAD
  if (grad2d.scalar_type() == at::kFloat && wide && rows >= kMinF32WeightGradRows && f32_weight_grad_supported()) {
    return weight_grads_f32(grad2d, h2d, bias_grad);
  }
#endif
  return aten_weight_grads(grad2d, h2d, bias_grad);
}

namespace {

// run_cpu_layer's own kernels (bias and ReLU included): the narrow float32 one, or the bfloat16
// one where the weight was packed as such, rows spread over the threads (inline inside a parallel
// task). Only layers that prepare_cpu_layer packed come here, so never without the kernel.
void run_packed_gemm(const CpuLayer& layer, const at::Tensor& x_rows, at::Tensor& acc) {
  if (layer.packed.scalar_type() == at::kBFloat16) {
#ifdef HYPATIA_WITH_AVX512BF16_GEMM
    Bf16Epilogue epilogue;
    epilogue.bias = layer.bias ? layer.bias->data_ptr<float>() : nullptr;
    epilogue.relu = layer.relu;
    run_bf16_gemm(x_rows, layer.packed, epilogue, acc);
#endif
    return;
  }
#ifdef HYPATIA_WITH_AVX2_GEMM
  const at::Tensor x = with_unit_column_stride(x_rows);
  const int64_t rows = x.size(0), in_features = x.size(1), out_features = acc.size(1);
  const float* bias = layer.bias ? layer.bias->data_ptr<float>() : nullptr;
  at::parallel_for(0, rows, rows_per_gemm_task(in_features * out_features), [&](int64_t begin, int64_t end) {
    narrow_gemm_act(x.data_ptr<float>() + begin * x.stride(0), x.stride(0), end - begin, in_features,
                    layer.packed.data_ptr<float>(), bias, out_features, layer.relu,
                    acc.data_ptr<float>() + begin * acc.stride(0), acc.stride(0));
  });
#endif
}

}  // namespace

void run_cpu_layer(const CpuLayer& layer, const at::Tensor& x_rows, at::Tensor& out_rows) {
  const at::Tensor lhs = layer.widened ? x_rows.to(at::kFloat) : x_rows;
  at::Tensor acc;
  if (layer.onednn_weight.defined()) {
    acc = onednn_linear(lhs, layer.onednn_weight, layer.bias);  // a new block: the op has no out= form
  } else {
    const bool in_place = !layer.widened && out_rows.stride(1) == 1;
    acc = in_place ? out_rows : at::empty(out_rows.sizes(), lhs.options());
    if (layer.packed.defined()) {
      run_packed_gemm(layer, lhs, acc);  // bias and ReLU included
    } else if (layer.bias) {
      at::addmm_out(acc, *layer.bias, lhs, layer.weight_t);
    } else {
      at::mm_out(acc, lhs, layer.weight_t);
    }
  }
  const bool copy = !acc.is_same(out_rows);
  if (layer.relu && !layer.packed.defined()) {
    if (copy && acc.scalar_type() == out_rows.scalar_type()) {
      relu_into(acc, out_rows);  // the ReLU and the copy in one pass
      return;
    }
    relu_into(acc, acc);  // relu commutes with the rounding below
  }
  if (copy) {
    out_rows.copy_(acc);
  }
}

namespace {

// Rows per block of a forward of `rows` rows through weight w.
int64_t forward_block_rows(const at::Tensor& w, int64_t rows) {
  return rows_per_block(w.size(0), gemm_element_size(w.scalar_type()), rows);
}

// out = act(x @ w.T + b) by `layer`, in row blocks of `block` rows spread over the threads,
// `epilogue` on each finished block.
void run_layer_blocks(
    const CpuLayer& layer, int64_t block, const at::Tensor& x, at::Tensor& out,
    std::optional<RowsEpilogue> epilogue) {
  if (out.numel() == 0) {
    return;
  }
  if (x.size(0) <= block) {
    // One block on the caller, whose GEMM used every thread: so does its epilogue (on a 16-core
    // Xeon, one thread packing a 256x512 ReLU mask took a fifth of the training forward).
    run_cpu_layer(layer, x, out);
    if (epilogue) {
      parallel_for_with_state(0, x.size(0), rows_per_task(out.size(1)), [&](int64_t begin, int64_t end) {
        (*epilogue)(out, begin, end - begin);
      });
    }
    return;
  }
  for_each_row_chunk(x.size(0), block, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r += block) {
      const int64_t n = std::min(block, end - r);
      at::Tensor out_rows = out.narrow(0, r, n);
      run_cpu_layer(layer, x.narrow(0, r, n), out_rows);
      if (epilogue) {
        (*epilogue)(out, r, n);
      }
    }
  });
}

// relu(x2d @ w.T + b) as one oneDNN inner product over all rows (w dense or packed), whose output is
// the op's; the ReLU (NaN stays NaN, as in eager) and the epilogue in one pass over row stretches.
at::Tensor onednn_linear_relu(
    const at::Tensor& x2d, const at::Tensor& w, const OptionalTensor& b, std::optional<RowsEpilogue> epilogue) {
  at::Tensor out = onednn_linear(x2d, w, b);
  parallel_for_with_state(0, out.size(0), rows_per_task(out.size(1)), [&](int64_t begin, int64_t end) {
    at::Tensor stretch = out.narrow(0, begin, end - begin);
    relu_into(stretch, stretch);
    if (epilogue) {
      (*epilogue)(out, begin, end - begin);
    }
  });
  return out;
}

}  // namespace

void linear_act_cpu_out(
    const at::Tensor& x, const at::Tensor& w, const OptionalTensor& b, bool relu, at::Tensor& out) {
  const int64_t block = forward_block_rows(w, x.size(0));
  run_layer_blocks(prepare_cpu_layer(w, b, relu, x.size(0), block), block, x, out, std::nullopt);
}

at::Tensor linear_relu_cpu_2d(
    const at::Tensor& x2d, const at::Tensor& w, const OptionalTensor& b, std::optional<RowsEpilogue> epilogue) {
  const int64_t rows = x2d.size(0), out_features = w.size(0);
  const int64_t in_features = x2d.size(1);
  if (x2d.scalar_type() == at::kFloat && in_features >= kMinOnednnInFeatures &&
      rows * in_features * out_features >= kMinOnednnMacs && has_onednn()) {
    return onednn_linear_relu(x2d, w.contiguous(), b, epilogue);
  }
  at::Tensor out = at::empty({rows, out_features}, x2d.options());
  if (out.numel() == 0) {
    return out;
  }
  const int64_t block = forward_block_rows(w, rows);
  const CpuLayer layer = prepare_cpu_layer(w, b, /*relu=*/true, rows, block);
  if (rows <= block && layer.onednn_weight.defined() && !layer.widened) {
    // One block, which the layer runs by oneDNN: its output is the op's (the block's copy saved).
    return onednn_linear_relu(x2d, layer.onednn_weight, layer.bias, epilogue);
  }
  run_layer_blocks(layer, block, x2d, out, epilogue);
  return out;
}

at::Tensor fused_linear_relu_cpu(const at::Tensor& input, const at::Tensor& weight, const OptionalTensor& bias) {
  check_linear_args("fused_linear_relu", input, weight, bias);
  const at::Tensor out = linear_relu_cpu_2d(as_rows(input), weight, bias, std::nullopt);
  return unflatten_rows(out, input);
}

std::vector<at::Tensor> fused_mlp_forward_cpu(
    const at::Tensor& input, at::TensorList weights, const OptionalTensorList& biases, bool relu_last) {
  // The hidden outputs live from this forward to the backward: the next call's take their memory again.
  return run_mlp_with(linear_act_cpu_out, input, weights, biases, relu_last, /*keep_hidden=*/true,
                      empty_from_buffer_cache);
}

}  // namespace hypatia::ops
