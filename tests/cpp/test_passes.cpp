// FuseLinearReLU / FuseMLP on IR text: the rewritten graph (FileCheck), the same outputs as the
// original graph on random data, and the cases that must be left alone.
#include <hypatia/fuse.h>
#include "passes/fuse_linear_relu.h"
#include "passes/fuse_mlp.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace {

using torch::jit::Graph;
using torch::jit::testing::FileCheck;

std::shared_ptr<Graph> parse(const std::string& ir) {
  auto graph = std::make_shared<Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

std::vector<c10::IValue> run(const std::shared_ptr<Graph>& graph, std::vector<c10::IValue> inputs) {
  torch::jit::Code code(graph->copy(), "test");
  torch::jit::InterpreterState(code).run(inputs);
  return inputs;
}

// x [5, 4], then alternating weights [N, K] and biases [N] for the layer widths given.
std::vector<c10::IValue> random_inputs(const std::vector<int64_t>& widths) {
  at::manual_seed(0);  // reproducible failures
  std::vector<c10::IValue> inputs = {at::randn({5, widths[0]}, at::kDouble)};
  for (size_t i = 1; i < widths.size(); ++i) {
    inputs.emplace_back(at::randn({widths[i], widths[i - 1]}, at::kDouble));
    inputs.emplace_back(at::randn({widths[i]}, at::kDouble));
  }
  return inputs;
}

// Fuses `ir` and checks that every output equals the unfused graph's, in float64.
hypatia::FusionReport fuse_and_compare(
    const std::shared_ptr<Graph>& graph, const std::vector<c10::IValue>& inputs, bool mlp = true) {
  const auto expected = run(graph, inputs);
  const auto report = hypatia::fuse_graph(graph, {/*freeze=*/false, mlp});
  graph->lint();
  const auto actual = run(graph, inputs);
  EXPECT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    const auto ref = expected[i].toTensor();
    // Relative, or absolute where the reference is near zero: a ReLU output can be all zeros.
    const double scale = std::max(ref.norm().item<double>(), 1.0);
    const double err = (actual[i].toTensor() - ref).norm().item<double>() / scale;
    EXPECT_LT(err, 1e-12) << "output " << i;
  }
  return report;
}

TEST(FuseLinearReLU, LinearRelu) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %y : Tensor = aten::linear(%x, %w, %b)
  %r : Tensor = aten::relu(%y)
  return (%r))IR");
  const auto report = fuse_and_compare(graph, random_inputs({4, 3}));
  EXPECT_EQ(report.linear_relu, 1);
  EXPECT_EQ(report.mlp, 0);
  FileCheck().check("hypatia::fused_linear_relu(%x, %w, %b)")->check_not("aten::")->run(*graph);
}

TEST(FuseLinearReLU, LinearInplaceRelu) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %y : Tensor = aten::linear(%x, %w, %b)
  %r : Tensor = aten::relu_(%y)
  return (%r))IR");
  EXPECT_EQ(fuse_and_compare(graph, random_inputs({4, 3})).linear_relu, 1);
  FileCheck().check("hypatia::fused_linear_relu")->check_not("aten::relu_")->run(*graph);
}

TEST(FuseLinearReLU, NoBias) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor):
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::linear(%x, %w, %none)
  %r : Tensor = aten::relu(%y)
  return (%r))IR");
  std::vector<c10::IValue> inputs = {at::randn({5, 4}, at::kDouble), at::randn({3, 4}, at::kDouble)};
  EXPECT_EQ(fuse_and_compare(graph, inputs).linear_relu, 1);
  FileCheck().check("prim::Constant()")->check("hypatia::fused_linear_relu(%x, %w, %")->run(*graph);
}

TEST(FuseLinearReLU, AddmmTransposeForm) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %wt : Tensor = aten::t(%w)
  %y : Tensor = aten::addmm(%b, %x, %wt, %one, %one)
  %r : Tensor = aten::relu(%y)
  return (%r))IR");
  EXPECT_EQ(fuse_and_compare(graph, random_inputs({4, 3})).linear_relu, 1);
  FileCheck().check("hypatia::fused_linear_relu(%x, %w, %b)")->check_not("aten::")->run(*graph);
}

TEST(FuseLinearReLU, AddmmWithOtherBetaIsLeftAlone) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %wt : Tensor = aten::t(%w)
  %y : Tensor = aten::addmm(%b, %x, %wt, %two, %one)
  %r : Tensor = aten::relu(%y)
  return (%r))IR");
  EXPECT_EQ(fuse_and_compare(graph, random_inputs({4, 3})).linear_relu, 0);
  FileCheck().check("aten::addmm")->check("aten::relu")->check_not("hypatia::")->run(*graph);
}

TEST(FuseLinearReLU, MatmulTransposeAddForm) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %wt : Tensor = aten::t(%w)
  %m : Tensor = aten::matmul(%x, %wt)
  %y : Tensor = aten::add(%m, %b, %one)
  %r : Tensor = aten::relu(%y)
  return (%r))IR");
  EXPECT_EQ(fuse_and_compare(graph, random_inputs({4, 3})).linear_relu, 1);
  FileCheck().check("hypatia::fused_linear_relu(%x, %w, %b)")->check_not("aten::")->run(*graph);
}

TEST(FuseLinearReLU, MatmulTransposeInplaceAddForm) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %wt : Tensor = aten::t(%w)
  %m : Tensor = aten::matmul(%x, %wt)
  %y : Tensor = aten::add_(%m, %b, %one)
  %r : Tensor = aten::relu_(%y)
  return (%r))IR");
  EXPECT_EQ(fuse_and_compare(graph, random_inputs({4, 3})).linear_relu, 1);
  FileCheck().check("hypatia::fused_linear_relu(%x, %w, %b)")->check_not("aten::")->run(*graph);
}

TEST(FuseLinearReLU, TransposeWithOtherUseStays) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %wt : Tensor = aten::t(%w)
  %y : Tensor = aten::addmm(%b, %x, %wt, %one, %one)
  %r : Tensor = aten::relu(%y)
  return (%r, %wt))IR");
  EXPECT_EQ(fuse_and_compare(graph, random_inputs({4, 3})).linear_relu, 1);
  FileCheck().check("aten::t(%w)")->check("hypatia::fused_linear_relu(%x, %w, %b)")->run(*graph);
}

TEST(FuseMLP, TwoLayers) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w1 : Tensor, %b1 : Tensor, %w2 : Tensor, %b2 : Tensor):
  %h1 : Tensor = aten::linear(%x, %w1, %b1)
  %a1 : Tensor = aten::relu(%h1)
  %h2 : Tensor = aten::linear(%a1, %w2, %b2)
  return (%h2))IR");
  const auto report = fuse_and_compare(graph, random_inputs({4, 6, 3}));
  EXPECT_EQ(report.mlp, 1);
  EXPECT_EQ(report.mlp_layers, 2);
  EXPECT_EQ(report.linear_relu, 0);
  FileCheck()
      .check("prim::ListConstruct(%w1, %w2)")
      ->check("prim::ListConstruct(%b1, %b2)")
      ->check("prim::Constant[value=0]")
      ->check("hypatia::fused_mlp")
      ->check_not("aten::")
      ->run(*graph);
}

TEST(FuseMLP, ThreeLayersReluLastMixedForms) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w1 : Tensor, %b1 : Tensor, %w2 : Tensor, %b2 : Tensor, %w3 : Tensor, %b3 : Tensor):
  %one : int = prim::Constant[value=1]()
  %h1 : Tensor = aten::linear(%x, %w1, %b1)
  %a1 : Tensor = aten::relu_(%h1)
  %w2t : Tensor = aten::t(%w2)
  %h2 : Tensor = aten::addmm(%b2, %a1, %w2t, %one, %one)
  %a2 : Tensor = aten::relu(%h2)
  %h3 : Tensor = aten::linear(%a2, %w3, %b3)
  %a3 : Tensor = aten::relu(%h3)
  return (%a3))IR");
  const auto report = fuse_and_compare(graph, random_inputs({4, 6, 5, 3}));
  EXPECT_EQ(report.mlp, 1);
  EXPECT_EQ(report.mlp_layers, 3);
  FileCheck()
      .check("prim::ListConstruct(%w1, %w2, %w3)")
      ->check("prim::Constant[value=1]")
      ->check("hypatia::fused_mlp")
      ->check_not("aten::")
      ->run(*graph);
}

TEST(FuseMLP, NoMlpOptionFusesPairsOnly) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w1 : Tensor, %b1 : Tensor, %w2 : Tensor, %b2 : Tensor):
  %h1 : Tensor = aten::linear(%x, %w1, %b1)
  %a1 : Tensor = aten::relu(%h1)
  %h2 : Tensor = aten::linear(%a1, %w2, %b2)
  %a2 : Tensor = aten::relu(%h2)
  return (%a2))IR");
  const auto report = fuse_and_compare(graph, random_inputs({4, 6, 3}), /*mlp=*/false);
  EXPECT_EQ(report.linear_relu, 2);
  EXPECT_EQ(report.mlp, 0);
  FileCheck().check_count("hypatia::fused_linear_relu", 2, /*exactly=*/true)->check_not("aten::")->run(*graph);
}

TEST(FuseMLP, EvalDropoutInFrozenGraphIsDropped) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w1 : Tensor, %b1 : Tensor, %w2 : Tensor, %b2 : Tensor):
  %p : float = prim::Constant[value=0.5]()
  %false : bool = prim::Constant[value=0]()
  %h1 : Tensor = aten::linear(%x, %w1, %b1)
  %d1 : Tensor = aten::dropout(%h1, %p, %false)
  %a1 : Tensor = aten::relu(%d1)
  %d2 : Tensor = aten::dropout(%a1, %p, %false)
  %h2 : Tensor = aten::linear(%d2, %w2, %b2)
  %a2 : Tensor = aten::relu(%h2)
  return (%a2))IR");
  const auto report = fuse_and_compare(graph, random_inputs({4, 6, 3}));
  EXPECT_EQ(report.mlp, 1);
  FileCheck().check("hypatia::fused_mlp")->check_not("aten::")->run(*graph);
}

TEST(FuseLinearReLU, EvalDropoutBetweenLinearAndRelu) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %p : float = prim::Constant[value=0.5]()
  %false : bool = prim::Constant[value=0]()
  %y : Tensor = aten::linear(%x, %w, %b)
  %d : Tensor = aten::dropout(%y, %p, %false)
  %r : Tensor = aten::relu(%d)
  return (%r))IR");
  EXPECT_EQ(fuse_and_compare(graph, random_inputs({4, 3})).linear_relu, 1);
  FileCheck().check("hypatia::fused_linear_relu")->check_not("aten::dropout")->run(*graph);
}

// Must not fuse ---------------------------------------------------------------------------------

TEST(FuseLinearReLU, IntermediateUsedTwiceIsLeftAlone) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %y : Tensor = aten::linear(%x, %w, %b)
  %r : Tensor = aten::relu(%y)
  return (%r, %y))IR");
  const auto report = fuse_and_compare(graph, random_inputs({4, 3}));
  EXPECT_EQ(report.linear_relu, 0);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].find("2 uses"), std::string::npos) << report.skipped[0];
  FileCheck().check("aten::linear")->check("aten::relu")->check_not("hypatia::")->run(*graph);
}

TEST(FuseMLP, ResidualStopsTheChain) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w1 : Tensor, %b1 : Tensor, %w2 : Tensor, %b2 : Tensor):
  %one : int = prim::Constant[value=1]()
  %h1 : Tensor = aten::linear(%x, %w1, %b1)
  %a1 : Tensor = aten::relu(%h1)
  %h2 : Tensor = aten::linear(%a1, %w2, %b2)
  %a2 : Tensor = aten::relu(%h2)
  %s : Tensor = aten::add(%a2, %a1, %one)
  return (%s))IR");
  const auto report = fuse_and_compare(graph, random_inputs({4, 4, 4}));
  EXPECT_EQ(report.mlp, 0);
  EXPECT_EQ(report.linear_relu, 2);
  FileCheck()
      .check_count("hypatia::fused_linear_relu", 2, /*exactly=*/true)
      ->check("aten::add")
      ->check_not("hypatia::fused_mlp")
      ->run(*graph);
}

TEST(FuseLinearReLU, InplaceReluOnAliasedValueIsLeftAlone) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %shape : int[] = prim::Constant[value=[-1]]()
  %y : Tensor = aten::linear(%x, %w, %b)
  %v : Tensor = aten::view(%y, %shape)
  %r : Tensor = aten::relu_(%y)
  return (%r, %v))IR");
  const auto report = fuse_and_compare(graph, random_inputs({4, 3}));
  EXPECT_EQ(report.linear_relu, 0);
  EXPECT_EQ(report.skipped.size(), 1u);
  FileCheck().check("aten::linear")->check("aten::relu_")->check_not("hypatia::")->run(*graph);
}

TEST(FuseLinearReLU, OperandWrittenBetweenIsLeftAlone) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %y : Tensor = aten::linear(%x, %w, %b)
  %z : Tensor = aten::add_(%x, %one, %one)
  %r : Tensor = aten::relu(%y)
  return (%r))IR");
  const auto report = hypatia::fuse_graph(graph);  // (the graph mutates its input: no run)
  EXPECT_EQ(report.linear_relu, 0);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].find("written"), std::string::npos) << report.skipped[0];
  FileCheck().check("aten::linear")->check("aten::add_")->check("aten::relu")->run(*graph);
}

TEST(FuseLinearReLU, NodesInDifferentBlocksAreLeftAlone) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %c : bool):
  %y : Tensor = aten::linear(%x, %w, %b)
  %r : Tensor = prim::If(%c)
    block0():
      %r1 : Tensor = aten::relu(%y)
      -> (%r1)
    block1():
      -> (%x)
  return (%r))IR");
  auto inputs = random_inputs({4, 4});
  inputs.emplace_back(true);
  const auto report = fuse_and_compare(graph, inputs);
  EXPECT_EQ(report.linear_relu, 0);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].find("another block"), std::string::npos) << report.skipped[0];
}

TEST(FuseLinearReLU, TrainModeDropoutIsLeftAlone) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %p : float = prim::Constant[value=0.5]()
  %true : bool = prim::Constant[value=1]()
  %y : Tensor = aten::linear(%x, %w, %b)
  %d : Tensor = aten::dropout(%y, %p, %true)
  %r : Tensor = aten::relu(%d)
  return (%r))IR");
  const auto report = hypatia::fuse_graph(graph);
  EXPECT_EQ(report.linear_relu, 0);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].find("training mode"), std::string::npos) << report.skipped[0];
  FileCheck().check("aten::dropout")->check_not("hypatia::")->run(*graph);
}

TEST(FuseMLP, NonConstantDropoutFlagStopsTheChain) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w1 : Tensor, %b1 : Tensor, %w2 : Tensor, %b2 : Tensor, %training : bool):
  %p : float = prim::Constant[value=0.5]()
  %h1 : Tensor = aten::linear(%x, %w1, %b1)
  %a1 : Tensor = aten::relu(%h1)
  %d : Tensor = aten::dropout(%a1, %p, %training)
  %h2 : Tensor = aten::linear(%d, %w2, %b2)
  %d2 : Tensor = aten::dropout(%h2, %p, %training)
  %a2 : Tensor = aten::relu(%d2)
  return (%a2))IR");
  auto inputs = random_inputs({4, 6, 3});
  inputs.emplace_back(false);
  const auto report = fuse_and_compare(graph, inputs);
  EXPECT_EQ(report.mlp, 0);
  EXPECT_EQ(report.linear_relu, 1);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].find("non-constant train flag"), std::string::npos) << report.skipped[0];
  FileCheck()
      .check("hypatia::fused_linear_relu")
      ->check("aten::dropout")
      ->check("aten::linear")
      ->check("aten::dropout")
      ->check("aten::relu")
      ->run(*graph);
}

TEST(FuseLinearReLU, KnownWrongWeightRankIsLeftAlone) {
  auto graph = parse(R"IR(
graph(%x : Float(5, 4), %w : Float(4), %b : Tensor):
  %y : Tensor = aten::linear(%x, %w, %b)
  %r : Tensor = aten::relu(%y)
  return (%r))IR");
  const auto report = hypatia::fuse_graph(graph);
  EXPECT_EQ(report.linear_relu, 0);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].find("1-D, expected 2-D"), std::string::npos) << report.skipped[0];
}

// Structure ------------------------------------------------------------------------------------

TEST(Fuse, NestedBlocks) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %c : bool):
  %n : int = prim::Constant[value=2]()
  %true : bool = prim::Constant[value=1]()
  %r : Tensor = prim::If(%c)
    block0():
      %y : Tensor = aten::linear(%x, %w, %b)
      %r1 : Tensor = aten::relu(%y)
      -> (%r1)
    block1():
      %l : Tensor = prim::Loop(%n, %true, %x)
        block0(%i : int, %acc : Tensor):
          %y2 : Tensor = aten::linear(%acc, %w, %b)
          %r2 : Tensor = aten::relu_(%y2)
          -> (%true, %r2)
      -> (%l)
  return (%r))IR");
  auto loop_inputs = random_inputs({4, 4});
  loop_inputs.emplace_back(false);
  const auto loop_expected = run(graph, loop_inputs)[0].toTensor();
  auto if_inputs = random_inputs({4, 4});
  if_inputs.emplace_back(true);
  EXPECT_EQ(fuse_and_compare(graph, if_inputs).linear_relu, 2);
  EXPECT_LT((run(graph, loop_inputs)[0].toTensor() - loop_expected).abs().max().item<double>(), 1e-12);
  FileCheck()
      .check("prim::If")
      ->check("hypatia::fused_linear_relu")
      ->check("prim::Loop")
      ->check("hypatia::fused_linear_relu")
      ->check_not("aten::")
      ->run(*graph);
}

TEST(Fuse, Idempotent) {
  auto graph = parse(R"IR(
graph(%x : Tensor, %w1 : Tensor, %b1 : Tensor, %w2 : Tensor, %b2 : Tensor, %w3 : Tensor, %b3 : Tensor):
  %h1 : Tensor = aten::linear(%x, %w1, %b1)
  %a1 : Tensor = aten::relu(%h1)
  %h2 : Tensor = aten::linear(%a1, %w2, %b2)
  %a2 : Tensor = aten::relu(%h2)
  %h3 : Tensor = aten::linear(%a2, %w3, %b3)
  %a3 : Tensor = aten::relu(%h3)
  %o : Tensor = aten::linear(%a3, %w3, %b3)
  %t : Tensor = aten::relu(%o)
  return (%t, %a3))IR");
  const auto first = hypatia::fuse_graph(graph);
  EXPECT_EQ(first.mlp, 1);
  EXPECT_EQ(first.linear_relu, 1);
  const std::string once = graph->toString();
  const auto second = hypatia::fuse_graph(graph);
  EXPECT_EQ(second.mlp + second.linear_relu, 0);
  EXPECT_EQ(graph->toString(), once);
}

TEST(FusionReport, TextAndJson) {
  hypatia::FusionReport report;
  report.linear_relu = 2;
  report.mlp = 1;
  report.mlp_layers = 3;
  report.skipped = {"aten::linear -> %y: \"quoted\""};
  EXPECT_EQ(
      report.to_json(),
      R"({"linear_relu": 2, "mlp": 1, "mlp_layers": 3, "skipped": ["aten::linear -> %y: \"quoted\""]})");
  EXPECT_NE(report.to_string().find("2 fused_linear_relu, 1 fused_mlp (3 linear layers); skipped: 1"), std::string::npos);
}

// Module level: submodule calls are inlined, parameters stay attributes of the same tensors.
TEST(FuseModule, InlinesSharesParametersAndFreezes) {
  torch::jit::Module inner("Inner");
  inner.register_parameter("w", at::randn({6, 4}, at::kDouble), false);
  inner.register_parameter("b", at::randn({6}, at::kDouble), false);
  inner.define(R"(
def forward(self, x):
    return torch.relu(torch.addmm(self.b, x, self.w.t()))
)");
  torch::jit::Module outer("Outer");
  outer.register_module("inner", inner);
  outer.register_parameter("w2", at::randn({3, 6}, at::kDouble), false);
  outer.define(R"(
def forward(self, x):
    return torch.matmul(self.inner.forward(x), self.w2.t())
)");
  const auto x = at::randn({5, 4}, at::kDouble);
  const auto expected = outer.forward({x}).toTensor();

  torch::jit::Module fused = outer;
  const auto report = hypatia::fuse(fused);
  EXPECT_EQ(report.mlp, 1);
  EXPECT_EQ(report.mlp_layers, 2);
  FileCheck().check("prim::GetAttr")->check("hypatia::fused_mlp")->check_not("prim::CallMethod")->run(
      *fused.get_method("forward").graph());
  FileCheck().check("prim::CallMethod")->run(*outer.get_method("forward").graph());  // original untouched
  EXPECT_TRUE(fused.attr("w2").toTensor().is_same(outer.attr("w2").toTensor()));
  EXPECT_LT((fused.forward({x}).toTensor() - expected).abs().max().item<double>(), 1e-12);

  torch::jit::Module frozen = outer;
  const auto frozen_report = hypatia::fuse(frozen, {/*freeze=*/true, /*mlp=*/true});
  EXPECT_EQ(frozen_report.mlp, 1);
  FileCheck().check("prim::Constant")->check("hypatia::fused_mlp")->check_not("prim::GetAttr")->run(
      *frozen.get_method("forward").graph());
  EXPECT_LT((frozen.forward({x}).toTensor() - expected).abs().max().item<double>(), 1e-12);
  EXPECT_TRUE(outer.is_training());
}

}  // namespace
