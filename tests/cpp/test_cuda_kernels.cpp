// The library's internal CUDA kernels, called directly, against the ATen ops they stand in for.
// Skipped without a GPU.
#include "ops/fused_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

#ifdef HYPATIA_WITH_CUDA

// A dense [rows, cols] CUDA tensor equal to `values`, whose data starts one element past a 16-byte
// boundary when `misaligned` (the kernels' scalar path).
at::Tensor dense_copy(const at::Tensor& values, bool misaligned) {
  const int64_t n = values.numel();
  at::Tensor flat = at::empty({n + 1}, values.options().device(at::kCUDA));
  at::Tensor t = flat.narrow(0, misaligned ? 1 : 0, n).view(values.sizes());
  t.copy_(values);
  return t;
}

// Each column of `sums` against eager's float64 sum of `masked`: within `tol` of the column's sum of
// magnitudes, and NaN / infinite exactly where eager's is.
void expect_column_sums(const at::Tensor& sums, const at::Tensor& masked, double tol, const std::string& what) {
  ASSERT_EQ(sums.scalar_type(), masked.scalar_type()) << what;
  const at::Tensor got = sums.cpu().to(at::kDouble), m = masked.cpu().to(at::kDouble);
  const at::Tensor ref = m.sum(0), scale = m.abs().nan_to_num(0, 0, 0).sum(0) + 1e-30;
  EXPECT_TRUE(got.isnan().equal(ref.isnan())) << what;
  EXPECT_TRUE(got.isinf().equal(ref.isinf())) << what;
  const at::Tensor finite = ref.isfinite();
  const double worst = ((got - ref).abs() / scale).masked_select(finite).max().item<double>();
  EXPECT_LE(worst, tol) << what;
}

double sum_tolerance(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return 1e-12;
    case at::kFloat: return 1e-5;
    case at::kHalf: return 2e-3;  // the one rounding of the float sum to half
    default: return 1e-2;         // ... to bfloat16
  }
}

struct Shape {
  int64_t rows, cols;
};

// Widths that take the vector path or not, one chunk of rows and many (partial sums added by a
// second kernel), a column tile of 256 vectors and more than one.
const std::vector<Shape> kShapes = {{1, 3}, {37, 64}, {300, 784}, {4099, 100}, {65536, 64}, {2048, 4104}, {513, 1}};

TEST(ReluBackwardSums, MatchesThresholdBackwardAndSum) {
  if (!at::hasCUDA()) {
    GTEST_SKIP() << "needs a GPU";
  }
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (const Shape& s : kShapes) {
      for (const bool misaligned : {false, true}) {
        std::ostringstream what;
        what << dtype << " " << s.rows << "x" << s.cols << (misaligned ? " misaligned" : "");
        const auto opts = at::TensorOptions().dtype(dtype);
        const at::Tensor grad_values = at::randn({s.rows, s.cols}, opts);
        // About half the outputs <= 0, some exactly 0 and -0, as a ReLU's are.
        at::Tensor out_values = at::relu(at::randn({s.rows, s.cols}, opts));
        out_values.view(-1).narrow(0, 0, (s.rows * s.cols + 1) / 2).mul_(-1);
        out_values = out_values.view(-1).index_select(0, at::randperm(s.rows * s.cols)).view({s.rows, s.cols});
        const at::Tensor eager = at::threshold_backward(grad_values, out_values, 0);

        // ReLU backward and sums.
        at::Tensor grad = dense_copy(grad_values, misaligned);
        at::Tensor sums = at::empty({s.cols}, grad.options());
        hypatia::ops::relu_backward_cuda_(grad, dense_copy(out_values, misaligned), sums);
        EXPECT_TRUE(grad.cpu().equal(eager)) << what.str();
        expect_column_sums(sums, eager, sum_tolerance(dtype), what.str() + " relu + sums");

        // ReLU backward alone.
        grad = dense_copy(grad_values, misaligned);
        at::Tensor no_sums;
        hypatia::ops::relu_backward_cuda_(grad, dense_copy(out_values, misaligned), no_sums);
        EXPECT_TRUE(grad.cpu().equal(eager)) << what.str() << " relu only";

        // Sums alone, the matrix untouched.
        grad = dense_copy(grad_values, misaligned);
        hypatia::ops::column_sums_cuda(grad, sums);
        EXPECT_TRUE(grad.cpu().equal(grad_values)) << what.str() << " sums only";
        expect_column_sums(sums, grad_values, sum_tolerance(dtype), what.str() + " sums only");
      }
    }
  }
}

TEST(ReluBackwardSums, PropagatesNaNAndInfAsEagerAndHandlesNoRows) {
  if (!at::hasCUDA()) {
    GTEST_SKIP() << "needs a GPU";
  }
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const int64_t rows : {64, 20000}) {  // one chunk, many
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    at::Tensor grad_values = at::randn({rows, 16}, opts);
    at::Tensor out_values = at::rand({rows, 16}, opts) + 0.5;
    grad_values.index_put_({3, 2}, nan);   // passed: column 2's sum is NaN
    grad_values.index_put_({5, 4}, nan);   // masked: column 4's sum stays finite
    out_values.index_put_({5, 4}, -1.0);
    out_values.index_put_({7, 6}, nan);    // a NaN output passes the gradient
    grad_values.index_put_({9, 8}, inf);   // passed: column 8's sum is infinite
    out_values.index_put_({11, 10}, -0.0); // -0 <= 0: masked
    const at::Tensor eager = at::threshold_backward(grad_values, out_values, 0);
    at::Tensor grad = dense_copy(grad_values, false);
    at::Tensor sums = at::empty({16}, grad.options());
    hypatia::ops::relu_backward_cuda_(grad, dense_copy(out_values, false), sums);
    const at::Tensor got = grad.cpu();
    EXPECT_TRUE(got.isnan().equal(eager.isnan())) << rows;
    EXPECT_TRUE(got.nan_to_num(0).equal(eager.nan_to_num(0))) << rows;
    expect_column_sums(sums, eager, 1e-5, "NaN/Inf, rows " + std::to_string(rows));
  }
  // No rows: zero sums, as eager's sum over an empty dimension.
  at::Tensor empty = at::empty({0, 8}, at::TensorOptions().device(at::kCUDA));
  at::Tensor sums = at::full({8}, 7.0, empty.options());
  hypatia::ops::relu_backward_cuda_(empty, at::empty({0, 8}, empty.options()), sums);
  EXPECT_TRUE(sums.cpu().equal(at::zeros({8})));
}

#endif  // HYPATIA_WITH_CUDA

}  // namespace
