#pragma once
// hypatia-run's outputs: a forward's result flattened into named leaves, and two results
// compared leaf by leaf.
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace hypatia::run {

// One leaf of an output: a tensor (numbers become 0-dim tensors) or, for strings, None and other
// values, their text.
struct OutputLeaf {
  std::string name;  // out, out[0], out["logits"], out[1][0], ...
  at::Tensor tensor;
  std::string text;
};

// Tuples, lists and dicts are walked in order (dicts in insertion order, as pytree flattens them).
std::vector<OutputLeaf> flatten_output(const c10::IValue& output);

struct LeafDiff {
  std::string name;
  std::string what;        // "[8, 10] float32", or the value's text
  double max_abs = 0;      // max |candidate - reference|; positions where both are NaN, or equal, count 0
  double rel_error = 0;    // ||candidate - reference|| / ||reference|| (||difference|| where the reference is 0)
};

// Compares the leaves in order (names from `reference`), in float64. Throws std::runtime_error
// when the two differ in number of leaves, in a tensor's shape, or in a non-tensor leaf's value.
std::vector<LeafDiff> compare_outputs(const std::vector<OutputLeaf>& reference, const std::vector<OutputLeaf>& candidate);

}  // namespace hypatia::run
