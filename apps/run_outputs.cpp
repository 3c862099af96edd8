// hypatia-run's outputs (apps/run_outputs.h).
#include "apps/run_outputs.h"

#include "apps/run_inputs.h"
#include "io/text.h"

#include <ATen/ops/isnan.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <stdexcept>

namespace hypatia::run {
namespace {

void flatten(const c10::IValue& v, const std::string& name, std::vector<OutputLeaf>& leaves) {
  if (v.isTensor()) {
    leaves.push_back({name, v.toTensor(), ""});
  } else if (v.isDouble() || v.isInt() || v.isBool()) {
    leaves.push_back({name, at::scalar_tensor(v.toScalar(), at::kDouble), ""});
  } else if (v.isTuple() || v.isList()) {
    const c10::ArrayRef<c10::IValue> elements = v.isTuple() ? v.toTupleRef().elements().asArrayRef() : v.toListRef();
    for (size_t i = 0; i < elements.size(); ++i) flatten(elements[i], name + "[" + std::to_string(i) + "]", leaves);
  } else if (v.isGenericDict()) {
    for (const auto& entry : v.toGenericDict()) {
      const c10::IValue& key = entry.key();
      const std::string key_text = key.isString() ? "\"" + printable(key.toStringRef()) + "\""
                                                  : key.isInt() ? std::to_string(key.toInt()) : describe(key);
      flatten(entry.value(), name + "[" + key_text + "]", leaves);
    }
  } else {
    leaves.push_back({name, at::Tensor(), v.isString() ? "'" + printable(v.toStringRef()) + "'" : v.tagKind()});
  }
}

}  // namespace

std::vector<OutputLeaf> flatten_output(const c10::IValue& output) {
  std::vector<OutputLeaf> leaves;
  flatten(output, "out", leaves);
  return leaves;
}

std::vector<LeafDiff> compare_outputs(const std::vector<OutputLeaf>& reference, const std::vector<OutputLeaf>& candidate) {
  if (reference.size() != candidate.size()) {
    throw std::runtime_error("the outputs differ in structure: " + std::to_string(reference.size()) + " against " +
                             std::to_string(candidate.size()) + " leaves");
  }
  std::vector<LeafDiff> diffs;
  for (size_t i = 0; i < reference.size(); ++i) {
    const OutputLeaf& ref = reference[i];
    const OutputLeaf& cand = candidate[i];
    if (ref.tensor.defined() != cand.tensor.defined() || (!ref.tensor.defined() && ref.text != cand.text)) {
      throw std::runtime_error("the outputs differ at " + ref.name + ": " +
                               (ref.tensor.defined() ? describe(ref.tensor) : ref.text) + " against " +
                               (cand.tensor.defined() ? describe(cand.tensor) : cand.text));
    }
    if (!ref.tensor.defined()) {
      diffs.push_back({ref.name, ref.text, 0, 0});
      continue;
    }
    if (ref.tensor.sizes() != cand.tensor.sizes()) {
      throw std::runtime_error("the output shapes differ at " + ref.name + ": " + describe(ref.tensor) + " against " +
                               describe(cand.tensor));
    }
    const at::Tensor r = ref.tensor.to(at::kCPU, at::kDouble);
    const at::Tensor c = cand.tensor.to(at::kCPU, at::kDouble);
    const at::Tensor same = r.eq(c).logical_or(at::isnan(r).logical_and(at::isnan(c)));
    const at::Tensor diff = at::where(same, at::zeros_like(r), c.sub(r));
    LeafDiff d{ref.name, describe(ref.tensor), 0, 0};
    if (diff.numel() > 0) {
      d.max_abs = diff.abs().max().item<double>();
      const double ref_norm = r.norm().item<double>();
      const double diff_norm = diff.norm().item<double>();
      d.rel_error = ref_norm > 0 ? diff_norm / ref_norm : diff_norm;
    }
    diffs.push_back(d);
  }
  return diffs;
}

}  // namespace hypatia::run
