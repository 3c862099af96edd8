// io/model_file.h and io/text.h: tensors checked against their storages (crafted sizes, strides and
// offsets, found wherever a module or a value holds them), printable one-line messages.
#include "io/model_file.h"
#include "io/text.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

// A float tensor over a storage of `storage_elements`, with sizes, strides and offset set unchecked,
// as the loader sets them from a file.
at::Tensor crafted(int64_t storage_elements, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  at::Tensor t = at::zeros({storage_elements});
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

// The message check_tensors throws for `t`, or "" when it passes.
std::string check(const at::Tensor& t) {
  try {
    hypatia::check_tensors(c10::IValue(t), "x");
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(CheckTensors, AcceptsTensorsInsideTheirStorage) {
  EXPECT_EQ(check(crafted(12, {3, 4}, {4, 1}, 0)), "");
  EXPECT_EQ(check(crafted(12, {4, 3}, {1, 4}, 0)), "");   // transposed
  EXPECT_EQ(check(crafted(12, {2, 2}, {4, 1}, 6)), "");   // the last element is the storage's last
  EXPECT_EQ(check(crafted(1, {5, 4}, {0, 0}, 0)), "");    // expanded
  EXPECT_EQ(check(crafted(0, {0, 7}, {7, 1}, 0)), "");    // no elements need no bytes
  EXPECT_EQ(check(crafted(0, {0}, {1 << 30}, 1 << 20)), "");
  EXPECT_EQ(check(at::Tensor()), "");                     // undefined
}

TEST(CheckTensors, RejectsTensorsOutsideTheirStorage) {
  EXPECT_EQ(check(crafted(11, {3, 4}, {4, 1}, 0)),
            "x: Float tensor of sizes [3, 4], strides [4, 1] and offset 0 needs 48 bytes of storage, which has 44");
  EXPECT_NE(check(crafted(12, {2, 2}, {4, 1}, 7)).find("needs 52 bytes"), std::string::npos);
  EXPECT_NE(check(crafted(12, {3, 4}, {4, 1}, -1)).find("has a negative offset"), std::string::npos);
  // Extents that overflow int64 in elements, or in bytes.
  EXPECT_NE(check(crafted(12, {3, 4}, {int64_t{1} << 62, 1}, 0)).find("overflows"), std::string::npos);
  EXPECT_NE(check(crafted(12, {2}, {int64_t{1} << 61}, 0)).find("overflows"), std::string::npos);
  EXPECT_NE(check(crafted(12, {int64_t{1} << 61}, {1}, 0)).find("overflows"), std::string::npos);
}

TEST(CheckTensors, NamesWhereTheTensorIs) {
  const at::Tensor bad = crafted(1, {4}, {1}, 0);
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("fine", at::zeros({2}));
  dict.insert("bad\nname", c10::ivalue::Tuple::create({at::zeros({1}), c10::List<at::Tensor>({at::zeros({1}), bad})}));
  try {
    hypatia::check_tensors(c10::IValue(dict), "inputs");
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_EQ(std::string(e.what_without_backtrace()).rfind("inputs[bad\\nname][1][1]: Float tensor of sizes [4]", 0), 0u)
        << e.what_without_backtrace();
  }
}

TEST(CheckTensors, WalksModulesAttributesAndGraphConstants) {
  torch::jit::Module module("m");
  module.register_parameter("weight", at::zeros({2, 2}), false);
  module.register_attribute("extra", c10::ListType::ofTensors(), c10::List<at::Tensor>({at::zeros({3})}));
  module.define(R"(
    def forward(self, x):
        return x + self.weight
  )");
  std::vector<std::string> seen;
  hypatia::for_each_tensor(module, [&](const std::string& where, const at::Tensor&) { seen.push_back(where); });
  EXPECT_EQ(seen, (std::vector<std::string>{"attribute weight", "attribute extra[0]"}));
  EXPECT_NO_THROW(hypatia::check_tensors(module));

  // A tensor constant in a nested block, as frozen graphs hold weights.
  torch::jit::Module frozen("f");
  frozen.define(R"(
    def forward(self, x, flag: bool):
        if flag:
            y = x + 1
        else:
            y = x - 1
        return y
  )");
  const auto graph = frozen.get_method("forward").graph();
  const auto branch = std::find_if(graph->nodes().begin(), graph->nodes().end(),
                                   [](torch::jit::Node* n) { return n->kind() == c10::prim::If; });
  ASSERT_NE(branch, graph->nodes().end()) << *graph;
  torch::jit::WithInsertPoint guard(branch->blocks()[0]->return_node());
  graph->insertConstant(crafted(2, {4}, {1}, 0));
  seen.clear();
  hypatia::for_each_tensor(frozen, [&](const std::string& where, const at::Tensor&) { seen.push_back(where); });
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rfind("constant 0 of __torch__.f.forward", 0), 0u) << seen[0];
  EXPECT_THROW(hypatia::check_tensors(frozen), c10::Error);

  // convert_module casts the constant and refreshes its type in the graph.
  torch::jit::Module fine("g");
  fine.define(R"(
    def forward(self, x):
        return x
  )");
  const auto g = fine.get_method("forward").graph();
  torch::jit::WithInsertPoint at_return(g->return_node());
  torch::jit::Value* constant = g->insertConstant(at::zeros({3}));
  hypatia::convert_module(fine, c10::kCPU, at::kBFloat16);
  EXPECT_EQ(constant->node()->t(c10::attr::value).scalar_type(), at::kBFloat16);
  EXPECT_EQ(constant->type()->expectRef<c10::TensorType>().scalarType(), at::kBFloat16);
}

TEST(Text, PrintableEscapesEverythingButPrintableAscii) {
  EXPECT_EQ(hypatia::printable("plain: ok"), "plain: ok");
  EXPECT_EQ(hypatia::printable(std::string("a\nb\tc\x1b[31m\xff\xc3\xa9\0", 14)), "a\\nb\\tc\\x1b[31m\\xff\\xc3\\xa9\\x00");
  EXPECT_EQ(hypatia::error_line("\n  first line \nsecond"), "first line");
  EXPECT_EQ(hypatia::error_line("The following operation failed in the TorchScript interpreter.\nTraceback\n"
                                "RuntimeError: bad \xff thing\n"),
            "RuntimeError: bad \\xff thing");
}


}  // namespace
