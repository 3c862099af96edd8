#include "passes/linear_chain.h"

#include <hypatia/fuse.h>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/graph_iterator.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace hypatia::passes {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool is_scalar_one(Value* v) {
  auto iv = torch::jit::toIValue(v);
  return iv && ((iv->isInt() && iv->toInt() == 1) || (iv->isDouble() && iv->toDouble() == 1.0));
}

Node* sole_user(Value* v) {
  return v->uses().size() == 1 ? v->uses()[0].user : nullptr;
}

bool is_relu_of(Node* n, Value* v) {
  return (n->matches("aten::relu(Tensor self) -> Tensor") ||
          n->matches("aten::relu_(Tensor(a!) self) -> Tensor(a!)")) &&
      n->input(0) == v;
}

bool is_dropout_of(Node* n, Value* v) {
  return (n->matches("aten::dropout(Tensor input, float p, bool train) -> Tensor") ||
          n->matches("aten::dropout_(Tensor(a!) self, float p, bool train) -> Tensor(a!)")) &&
      n->input(0) == v;
}

// Dropout is the identity only when its train flag is a constant False (frozen eval graphs).
bool is_eval_dropout_of(Node* n, Value* v) {
  if (!is_dropout_of(n, v)) {
    return false;
  }
  auto train = torch::jit::constant_as<bool>(n->input(2));
  return train.has_value() && !*train;
}

bool is_transpose(Node* n) {
  return n->matches("aten::t(Tensor(a) self) -> Tensor(a)");
}

// The weight of a layer whose transposed weight is `wt`: aten::t(w), or a 2-D constant (w.T
// folded by freezing).
bool weight_from_transposed(Value* wt, LinearLayer& layer) {
  Node* t = wt->node();
  if (is_transpose(t)) {
    layer.weight = t->input(0);
    layer.transposes = {t};
    return true;
  }
  auto constant = torch::jit::toIValue(wt);
  if (constant && constant->isTensor() && constant->toTensor().dim() == 2) {
    layer.constant_weight = constant->toTensor().t().contiguous();
    return true;
  }
  return false;
}

// The rank of a tensor value when its type or constant value tells it.
std::optional<int64_t> known_dim(Value* v) {
  if (auto iv = torch::jit::toIValue(v); iv && iv->isTensor()) {
    return iv->toTensor().dim();
  }
  if (auto t = v->type()->cast<c10::TensorType>()) {
    if (auto dim = t->dim()) {
      return static_cast<int64_t>(*dim);
    }
  }
  return std::nullopt;
}

std::string describe(Node* n) {
  return std::string(n->kind().toQualString()) + " -> %" + n->output()->debugName();
}

// A layer match plus, when its weight or bias has the wrong known rank, why it cannot be fused.
struct LayerMatch {
  LinearLayer layer;
  std::string bad_shape;
};

// The bias of `add`, when `add` is `m + bias` (alpha 1) with `m` used nowhere else.
Value* bias_of_add(Node* add, Value* m) {
  if (add->matches("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")) {
    return is_scalar_one(add->input(2)) && add->input(0) == m && add->input(1) != m ? add->input(1) : nullptr;
  }
  if (!add->matches("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") ||
      !is_scalar_one(add->input(2))) {
    return nullptr;
  }
  if (add->input(0) == m && add->input(1) != m) {
    return add->input(1);
  }
  if (add->input(1) == m && add->input(0) != m) {
    return add->input(0);
  }
  return nullptr;
}

// `first` as the first node of a linear layer applied to `x` (any input when x is null):
//   aten::linear(x, w, b)
//   aten::addmm(b, x, aten::t(w), 1, 1)
//   aten::matmul(x, aten::t(w)) [+ aten::add(_, b, 1) or aten::add_]
std::optional<LayerMatch> match_layer(Node* first, Value* x) {
  LinearLayer layer;
  if (first->matches("aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor")) {
    layer.input = first->input(0);
    layer.weight = first->input(1);
    layer.bias = first->input(2);
    layer.output = first->output();
    layer.nodes = {first};
  } else if (
      first->matches(
          "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor") &&
      is_scalar_one(first->input(3)) && is_scalar_one(first->input(4)) &&
      weight_from_transposed(first->input(2), layer)) {
    layer.input = first->input(1);
    layer.bias = first->input(0);
    layer.output = first->output();
    layer.nodes = {first};
  } else if (
      first->matches("aten::matmul(Tensor self, Tensor other) -> Tensor") &&
      weight_from_transposed(first->input(1), layer)) {
    layer.input = first->input(0);
    layer.output = first->output();
    layer.nodes = {first};
    Node* add = sole_user(first->output());
    if (add && add->owningBlock() == first->owningBlock()) {
      if (Value* bias = bias_of_add(add, first->output())) {
        layer.bias = bias;
        layer.output = add->output();
        layer.nodes.push_back(add);
      }
    }
  } else {
    return std::nullopt;
  }
  if (x && layer.input != x) {
    return std::nullopt;
  }
  LayerMatch match{layer, ""};
  if (auto dim = layer.weight ? known_dim(layer.weight) : 2; dim && *dim != 2) {
    match.bad_shape = "weight is " + std::to_string(*dim) + "-D, expected 2-D";
  } else if (layer.bias && !layer.bias->type()->cast<c10::NoneType>()) {
    if (auto dim = known_dim(layer.bias); dim && *dim != 1) {
      match.bad_shape = "bias is " + std::to_string(*dim) + "-D, expected 1-D";
    }
  }
  return match;
}

// The sole user of `v` in `block`, looking through eval-mode dropouts (collected in `dropouts`).
Node* next_op(Value* v, Block* block, std::vector<Node*>& dropouts) {
  for (;;) {
    Node* user = sole_user(v);
    if (!user || user->owningBlock() != block) {
      return nullptr;
    }
    if (!is_eval_dropout_of(user, v)) {
      return user;
    }
    dropouts.push_back(user);
    v = user->output();
  }
}

// Why the layer output `v` is not fusable with a ReLU that consumes it (possibly through
// dropouts); empty when no ReLU consumes it, i.e. when it is no candidate at all.
std::string why_not_relu(Value* v, Block* block) {
  for (;;) {
    Node* relu = nullptr;
    Node* dropout = nullptr;
    for (const auto& use : v->uses()) {
      if (is_relu_of(use.user, v)) {
        relu = use.user;
      } else if (is_dropout_of(use.user, v)) {
        dropout = use.user;
      }
    }
    Node* next = relu ? relu : dropout;
    if (!next) {
      return "";
    }
    if (v->uses().size() > 1) {
      return "%" + v->debugName() + " feeding " + next->kind().toQualString() + " has " +
          std::to_string(v->uses().size()) + " uses";
    }
    if (next->owningBlock() != block) {
      return std::string(next->kind().toQualString()) + " sits in another block";
    }
    if (relu) {
      return "";
    }
    auto train = torch::jit::constant_as<bool>(dropout->input(2));
    if (!train) {
      return "dropout before the ReLU has a non-constant train flag (freeze the module to fuse it)";
    }
    if (*train) {
      return "dropout before the ReLU is in training mode";
    }
    v = dropout->output();
  }
}

// Linear -> ReLU (-> Linear -> ReLU ...) starting at `first`; nullopt with `why` empty when
// `first` starts no candidate of `kind`.
std::optional<LinearChain> build_chain(Node* first, ChainKind kind, std::string& why) {
  auto head = match_layer(first, nullptr);
  if (!head) {
    return std::nullopt;
  }
  Block* block = first->owningBlock();
  std::vector<Node*> dropouts;
  Node* relu = next_op(head->layer.output, block, dropouts);
  if (!relu || !is_relu_of(relu, dropouts.empty() ? head->layer.output : dropouts.back()->output())) {
    if (kind == ChainKind::kLinearReLU) {
      why = why_not_relu(head->layer.output, block);
    }
    return std::nullopt;
  }
  if (!head->bad_shape.empty()) {
    if (kind == ChainKind::kLinearReLU) {
      why = head->bad_shape;
    }
    return std::nullopt;
  }
  LinearChain chain;
  chain.layers.push_back(head->layer);
  chain.nodes = head->layer.nodes;
  chain.nodes.insert(chain.nodes.end(), dropouts.begin(), dropouts.end());
  chain.nodes.push_back(relu);
  chain.output = relu->output();
  chain.relu_last = true;

  while (kind == ChainKind::kMLP) {
    std::vector<Node*> gap;
    Node* next = next_op(chain.output, block, gap);
    if (!next) {
      break;
    }
    auto layer = match_layer(next, gap.empty() ? chain.output : gap.back()->output());
    if (!layer || !layer->bad_shape.empty()) {
      break;
    }
    chain.layers.push_back(layer->layer);
    chain.nodes.insert(chain.nodes.end(), gap.begin(), gap.end());
    chain.nodes.insert(chain.nodes.end(), layer->layer.nodes.begin(), layer->layer.nodes.end());
    chain.output = layer->layer.output;
    chain.relu_last = false;
    std::vector<Node*> tail;
    Node* after = next_op(chain.output, block, tail);
    if (!after || !is_relu_of(after, tail.empty() ? chain.output : tail.back()->output())) {
      break;
    }
    chain.nodes.insert(chain.nodes.end(), tail.begin(), tail.end());
    chain.nodes.push_back(after);
    chain.output = after->output();
    chain.relu_last = true;
  }
  if (kind == ChainKind::kMLP && chain.layers.size() < 2) {
    return std::nullopt;
  }
  return chain;
}

// The fused op runs where the chain's last node was: nothing between the chain's first and last
// node may write to its input, weights or biases.
bool inputs_written_inside(const LinearChain& chain, const torch::jit::AliasDb& alias_db) {
  torch::jit::ValueSet reads = {chain.layers.front().input};
  for (const auto& layer : chain.layers) {
    if (layer.weight) {
      reads.insert(layer.weight);
    }
    if (layer.bias) {
      reads.insert(layer.bias);
    }
  }
  const std::unordered_set<Node*> own(chain.nodes.begin(), chain.nodes.end());
  for (Node* n = chain.nodes.front()->next(); n != chain.nodes.back(); n = n->next()) {
    if (!own.count(n) && alias_db.writesToAlias(n, reads)) {
      return true;
    }
  }
  return false;
}

// Whether any node of the graph writes in place to a tensor input of it (or to a view of one).
bool writes_an_input(const std::shared_ptr<Graph>& graph, const torch::jit::AliasDb& alias_db) {
  torch::jit::ValueSet inputs;
  for (Value* v : graph->inputs()) {
    if (v->type()->cast<c10::TensorType>()) {
      inputs.insert(v);
    }
  }
  if (inputs.empty()) {
    return false;
  }
  std::shared_ptr<Graph> g = graph;  // the iterator takes a non-const reference
  torch::jit::DepthFirstGraphNodeIterator it(g);
  for (Node* n = it.next(); n != nullptr; n = it.next()) {
    if (alias_db.writesToAlias(n, inputs)) {
      return true;
    }
  }
  return false;
}

// A chain whose weights are the module's attributes (not frozen yet) in a graph that writes to its
// input: torch.jit.freeze cannot prove a list's elements unwritten there and keeps fused_mlp's
// weights as attributes (parameters that require grad, so its backward saves the input) where it
// folds an unfused Linear's (measured: fuzzer seed 1 program 13829). fused_linear_relu takes the
// weight itself, which freeze folds: such chains are left to the pairs pass.
bool attribute_weights(const LinearChain& chain) {
  return std::any_of(chain.layers.begin(), chain.layers.end(), [](const auto& layer) {
    return layer.weight && layer.weight->node()->kind() == c10::prim::GetAttr;
  });
}

void collect(
    Block* block,
    ChainKind kind,
    const torch::jit::AliasDb& alias_db,
    bool graph_writes_an_input,
    std::unordered_set<Node*>& taken,
    std::vector<LinearChain>& chains,
    std::vector<std::string>& skipped) {
  for (Node* n : block->nodes()) {
    for (Block* sub : n->blocks()) {
      collect(sub, kind, alias_db, graph_writes_an_input, taken, chains, skipped);
    }
    if (taken.count(n)) {
      continue;
    }
    std::string why;
    auto chain = build_chain(n, kind, why);
    if (chain && std::any_of(chain->nodes.begin(), chain->nodes.end(), [&](Node* c) { return taken.count(c); })) {
      chain.reset();
    }
    if (chain && inputs_written_inside(*chain, alias_db)) {
      why = "an input, weight or bias is written between the chain's nodes";
      chain.reset();
    }
    if (chain && kind == ChainKind::kMLP && graph_writes_an_input && attribute_weights(*chain)) {
      why = "the graph writes to its input in place, so torch.jit.freeze would keep fused_mlp's weights as "
            "attributes (left to fused_linear_relu)";
      chain.reset();
    }
    if (chain) {
      taken.insert(chain->nodes.begin(), chain->nodes.end());
      chains.push_back(std::move(*chain));
    } else if (!why.empty()) {
      skipped.push_back(describe(n) + ": " + why);
    }
  }
}

}  // namespace

std::vector<LinearChain> find_chains(
    const std::shared_ptr<Graph>& graph, ChainKind kind, std::vector<std::string>& skipped) {
  const torch::jit::AliasDb alias_db(graph);
  std::unordered_set<Node*> taken;
  std::vector<LinearChain> chains;
  const bool graph_writes_an_input = kind == ChainKind::kMLP && writes_an_input(graph, alias_db);
  collect(graph->block(), kind, alias_db, graph_writes_an_input, taken, chains, skipped);
  return chains;
}

void rewrite_chains(Graph& graph, const std::vector<LinearChain>& chains) {
  std::vector<Node*> transposes;
  // A chain may read the output of one rewritten before it (pairs in a row).
  std::unordered_map<Value*, Value*> replaced;
  auto current = [&](Value* v) {
    auto it = replaced.find(v);
    return it == replaced.end() ? v : it->second;
  };
  for (const auto& chain : chains) {
    Node* last = chain.nodes.back();
    torch::jit::WithInsertPoint guard(last);
    auto bias_or_none = [&](const LinearLayer& layer) {
      return layer.bias ? current(layer.bias) : graph.insertConstant(c10::IValue());
    };
    auto weight = [&](const LinearLayer& layer) {
      return layer.weight ? current(layer.weight) : graph.insertConstant(*layer.constant_weight);
    };
    Node* fused = nullptr;
    if (chain.layers.size() == 1) {
      const auto& layer = chain.layers.front();
      fused = graph.create(fused_linear_relu_symbol(), {current(layer.input), weight(layer), bias_or_none(layer)});
    } else {
      std::vector<Value*> weights;
      std::vector<Value*> biases;
      for (const auto& layer : chain.layers) {
        weights.push_back(weight(layer));
        biases.push_back(bias_or_none(layer));
      }
      Value* weight_list = graph.insertNode(graph.createList(c10::TensorType::get(), weights))->output();
      Value* bias_list = graph.insertNode(graph.createList(c10::OptionalType::ofTensor(), biases))->output();
      fused = graph.create(
          fused_mlp_symbol(),
          {current(chain.layers.front().input), weight_list, bias_list, graph.insertConstant(chain.relu_last)});
    }
    graph.insertNode(fused);
    fused->copyMetadata(last);
    fused->output()->setType(chain.output->type());
    chain.output->replaceAllUsesWith(fused->output());
    replaced[chain.output] = fused->output();
    for (auto it = chain.nodes.rbegin(); it != chain.nodes.rend(); ++it) {
      (*it)->destroy();
    }
    for (const auto& layer : chain.layers) {
      transposes.insert(transposes.end(), layer.transposes.begin(), layer.transposes.end());
    }
  }
  // A transpose may feed several layers (tied weights): drop it once nothing reads it.
  std::sort(transposes.begin(), transposes.end());
  transposes.erase(std::unique(transposes.begin(), transposes.end()), transposes.end());
  for (Node* t : transposes) {
    if (!t->output()->hasUses()) {
      t->destroy();
    }
  }
}

}  // namespace hypatia::passes
