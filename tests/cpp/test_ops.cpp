// The kernels against an ATen float64 reference, through the dispatcher as users call them,
// and the errors that malformed calls raise.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using OptionalTensorList = c10::List<std::optional<at::Tensor>>;

at::Tensor fused_linear_relu(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("hypatia::fused_linear_relu", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
  return op.call(x, w, b);
}

at::Tensor fused_mlp(const at::Tensor& x, at::TensorList ws, const OptionalTensorList& bs, bool relu_last) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("hypatia::fused_mlp", "")
          .typed<at::Tensor(const at::Tensor&, at::TensorList, const OptionalTensorList&, bool)>();
  return op.call(x, ws, bs, relu_last);
}

double rel_error(const at::Tensor& out, const at::Tensor& ref) {
  return (out.to(at::kDouble) - ref).norm().item<double>() / ref.norm().item<double>();
}

double tolerance(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return 1e-12;
    case at::kFloat: return 1e-5;
    default: return 1e-2;  // bf16 / fp16 operands
  }
}

std::vector<c10::Device> devices() {
  std::vector<c10::Device> d = {at::kCPU};
  if (at::hasCUDA()) {
    d.emplace_back(at::kCUDA);
  }
  return d;
}

struct Case {
  at::ScalarType dtype;
  std::vector<int64_t> batch;
  int64_t in, out;
  bool bias;
};

TEST(FusedLinearReLU, MatchesFloat64Reference) {
  const std::vector<Case> cases = {
      {at::kFloat, {7}, 13, 5, true},        {at::kDouble, {3, 4}, 16, 8, true}, {at::kBFloat16, {64}, 32, 48, true},
      {at::kHalf, {2, 3, 5}, 24, 40, false}, {at::kFloat, {}, 9, 11, true},     {at::kFloat, {130}, 256, 512, false},
  };
  for (const c10::Device device : devices()) {
    for (const Case& c : cases) {
      at::manual_seed(0);
      auto shape = c.batch;
      shape.push_back(c.in);
      const auto opts = at::TensorOptions().dtype(c.dtype).device(device);
      const at::Tensor x = at::randn(shape, opts);
      const at::Tensor w = at::randn({c.out, c.in}, opts) / std::sqrt(double(c.in));
      const std::optional<at::Tensor> b = c.bias ? std::optional(at::randn({c.out}, opts)) : std::nullopt;
      const at::Tensor ref = at::relu(at::linear(
          x.cpu().to(at::kDouble), w.cpu().to(at::kDouble), b ? std::optional(b->cpu().to(at::kDouble)) : b));
      const at::Tensor out = fused_linear_relu(x, w, b);
      EXPECT_EQ(out.sizes(), ref.sizes());
      EXPECT_EQ(out.scalar_type(), c.dtype);
      EXPECT_EQ(out.device().type(), device.type());
      EXPECT_LT(rel_error(out.cpu(), ref), tolerance(c.dtype)) << device << " " << c.dtype;
    }
  }
}

TEST(FusedMLP, MatchesFloat64Reference) {
  for (const c10::Device device : devices()) {
    for (const bool relu_last : {false, true}) {
      at::manual_seed(1);
      const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
      const std::vector<int64_t> widths = {20, 33, 17, 9};
      const at::Tensor x = at::randn({5, 6, widths[0]}, opts);
      std::vector<at::Tensor> ws;
      OptionalTensorList bs;
      at::Tensor ref = x.cpu().to(at::kDouble);
      for (size_t i = 0; i + 1 < widths.size(); ++i) {
        ws.push_back(at::randn({widths[i + 1], widths[i]}, opts) / std::sqrt(double(widths[i])));
        bs.push_back(i == 1 ? std::nullopt : std::optional(at::randn({widths[i + 1]}, opts)));
        const std::optional<at::Tensor> b = bs.get(i);
        ref = at::linear(ref, ws.back().cpu().to(at::kDouble), b ? std::optional(b->cpu().to(at::kDouble)) : b);
        if (i + 2 < widths.size() || relu_last) {
          ref = at::relu(ref);
        }
      }
      const at::Tensor out = fused_mlp(x, ws, bs, relu_last);
      EXPECT_EQ(out.sizes(), ref.sizes());
      EXPECT_LT(rel_error(out.cpu(), ref), 1e-5) << device << " relu_last=" << relu_last;
    }
  }
}

TEST(FusedLinearReLU, PropagatesNaNAndHandlesEmptyBatch) {
  for (const c10::Device device : devices()) {
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
    at::Tensor x = at::randn({4, 8}, opts);
    x.index_put_({1, 2}, std::numeric_limits<float>::quiet_NaN());
    const at::Tensor w = at::randn({3, 8}, opts);
    const at::Tensor out = fused_linear_relu(x, w, std::nullopt).cpu();
    EXPECT_TRUE(out[1].isnan().all().item<bool>()) << device;
    EXPECT_FALSE(out[0].isnan().any().item<bool>()) << device;

    const at::Tensor empty = fused_linear_relu(at::randn({0, 8}, opts), w, at::randn({3}, opts));
    EXPECT_EQ(empty.sizes(), at::IntArrayRef({0, 3}));
  }
}

// Runs fn, expecting a c10::Error whose message contains `expected`.
template <typename Fn>
void expect_error(const Fn& fn, const std::string& expected) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << expected;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find(expected), std::string::npos)
        << "message: " << e.what_without_backtrace() << "\nexpected to contain: " << expected;
  }
}

// in_features == 0 (narrow and wide layers): the output is relu(bias). A float32 narrow layer once
// packed its empty weight with memset(nullptr, 0, 0), undefined behaviour that UBSan reports
// (scripts/sanitize.sh cpu runs this test under it).
TEST(FusedLinearReLU, ZeroInFeaturesGivesReluOfBias) {
  for (const int64_t out : {3, 300}) {
    const at::Tensor x = at::randn({4, 0}), w = at::randn({out, 0}), b = at::randn({out});
    EXPECT_TRUE(fused_linear_relu(x, w, b).equal(at::relu(b).expand({4, out}))) << out;
    EXPECT_TRUE(fused_linear_relu(x, w, std::nullopt).equal(at::zeros({4, out}))) << out;
  }
}

TEST(Errors, NameTheArgumentAndWhatWasExpected) {
  const at::Tensor x = at::randn({2, 4});
  const at::Tensor w = at::randn({5, 4});
  expect_error([&] { fused_linear_relu(x, at::randn({5, 3}), std::nullopt); },
               "fused_linear_relu: weight expects in_features 3 but input has last dimension 4");
  expect_error([&] { fused_linear_relu(x, at::randn({5}), std::nullopt); }, "weight must be 2-D");
  expect_error([&] { fused_linear_relu(at::randn({}), w, std::nullopt); }, "input must have at least 1 dimension");
  expect_error([&] { fused_linear_relu(x, w, at::randn({4})); }, "bias must be 1-D of length out_features = 5");
  expect_error([&] { fused_linear_relu(x, w.to(at::kDouble), std::nullopt); },
               "weight must have the input's dtype Float, but got Double");
  expect_error([&] { fused_linear_relu(x.to(at::kInt), w.to(at::kInt), std::nullopt); },
               "input must be float32, float64, bfloat16 or float16, but got Int");
  expect_error([&] { fused_mlp(x, {w, at::randn({3, 4})}, OptionalTensorList({std::nullopt, std::nullopt}), false); },
               "fused_mlp: weights[1] expects in_features 4 but layer 0 produces 5");
  expect_error([&] { fused_mlp(x, {w}, OptionalTensorList(), false); },
               "biases must have one entry (a tensor or None) per layer, i.e. 1, but got 0");
  expect_error([&] { fused_mlp(x, {}, OptionalTensorList(), false); }, "weights must hold at least one layer");
  expect_error([&] { fused_mlp(x, {w}, OptionalTensorList({at::randn({5}, at::kDouble)}), false); },
               "biases[0] must have the input's dtype Float, but got Double");
}

}  // namespace
