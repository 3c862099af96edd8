// hypatia-run's models (apps/run_model.h).
#include "apps/run_model.h"

#include <hypatia/fuse.h>

#include "io/model_file.h"
#include "io/text.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <algorithm>
#include <sstream>
#include <utility>

namespace hypatia::run {
namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// A pytree spec (the JSON of torch.utils._pytree.treespec_dumps) has one {"type": null, ...} per leaf.
size_t spec_leaves(const std::string& spec) {
  return count_of(spec, "\"type\": null");
}

std::vector<c10::Argument> forward_arguments(const torch::jit::Module& module) {
  const auto& arguments = module.get_method("forward").function().getSchema().arguments();
  return std::vector<c10::Argument>(arguments.begin() + (arguments.empty() ? 0 : 1), arguments.end());
}

std::string count_text(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string given_text(size_t n) {
  return std::to_string(n) + (n == 1 ? " was" : " were") + " given";
}

// The last element of an int list given as a constant or as a ListConstruct of constants.
std::optional<int64_t> last_constant_int(torch::jit::Value* list) {
  if (list->node()->kind() == c10::prim::ListConstruct) {
    if (list->node()->inputs().empty()) return std::nullopt;
    const auto last = torch::jit::toIValue(list->node()->inputs().back());
    return last && last->isInt() ? std::optional<int64_t>(last->toInt()) : std::nullopt;
  }
  const auto iv = torch::jit::toIValue(list);
  if (!iv || !iv->isIntList() || iv->toIntList().empty()) return std::nullopt;
  const auto ints = iv->toIntList();
  return ints.get(ints.size() - 1);
}

// The in-features of a weight [out, in] given as a constant tensor, or as the first element
// of a constant list of them (fused_mlp).
std::optional<int64_t> weight_in_features(torch::jit::Value* weight) {
  torch::jit::Value* first = weight;
  if (weight->node()->kind() == c10::prim::ListConstruct && weight->node()->inputs().size() > 0) {
    first = weight->node()->inputs()[0];
  }
  const auto iv = torch::jit::toIValue(first);
  if (iv && iv->isTensor() && iv->toTensor().dim() == 2) return iv->toTensor().size(1);
  if (iv && iv->isTensorList() && !iv->toTensorList().empty()) {
    const at::Tensor w = iv->toTensorList().get(0);
    if (w.dim() == 2) return w.size(1);
  }
  return std::nullopt;
}

}  // namespace

bool is_package_path(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".pt2") == 0;
}

Model::Model(std::string path, std::string label) : path_(std::move(path)), label_(std::move(label)) {}

Model::Model(std::string path, std::string label, torch::jit::Module module)
    : path_(std::move(path)), label_(std::move(label)), module_(std::move(module)) {}

Model Model::load(const std::string& path, std::string label, c10::Device device, std::optional<at::ScalarType> dtype,
                  size_t runners) {
  if (!is_package_path(path)) {
    Model model(path, std::move(label), hypatia::load_module(path));
    if (!device.is_cpu() || dtype) hypatia::convert_module(*model.module_, device, dtype);
    return model;
  }
  if (dtype) {
    throw UsageError("--dtype cannot cast " + printable(path) + ": an AOTInductor package's dtypes are compiled in");
  }
  Model model(path, std::move(label));
  std::unordered_map<std::string, std::string> metadata;
  try {
    metadata = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot load '" + printable(path) + "' as an AOTInductor package: " +
                             hypatia::error_line(e.what()));
  }
  const std::string compiled_for = metadata.count("AOTI_DEVICE_KEY") ? metadata.at("AOTI_DEVICE_KEY") : "";
  if (compiled_for != c10::DeviceTypeName(device.type(), /*lower_case=*/true)) {
    throw UsageError(printable(path) + " was compiled for " + (compiled_for.empty() ? "an unknown device" : printable(compiled_for)) +
                     "; run it with --device " + (compiled_for.empty() ? "cpu|cuda" : printable(compiled_for)));
  }
  try {
    model.package_ = std::make_shared<torch::inductor::AOTIModelPackageLoader>(
        path, "model", /*run_single_threaded=*/false, std::max<size_t>(runners, 1),
        device.is_cuda() ? device.index() : c10::DeviceIndex(-1));
    const std::vector<std::string> spec = model.package_->get_call_spec();
    TORCH_CHECK(spec.size() == 2, "its call spec has " + std::to_string(spec.size()) + " parts, not 2");
    model.package_inputs_ = spec_leaves(spec[0]);
    model.package_returns_tensor_ = spec[1].rfind("[1, {\"type\": null", 0) == 0;
  } catch (const c10::Error& e) {
    throw std::runtime_error("cannot load '" + printable(path) + "' as an AOTInductor package: " +
                             hypatia::error_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot load '" + printable(path) + "' as an AOTInductor package: " +
                             hypatia::error_line(e.what()));
  }
  return model;
}

torch::jit::Module& Model::module() {
  TORCH_CHECK(module_, path_ + " is not a TorchScript model");
  return *module_;
}

c10::IValue Model::forward(const Inputs& inputs) const {
  if (module_) return module_->get_method("forward")(inputs.args, inputs.kwargs);
  std::vector<at::Tensor> tensors;
  tensors.reserve(inputs.args.size());
  for (const auto& arg : inputs.args) tensors.push_back(arg.toTensor());
  // A null stream: the current one (each --parallel thread has its own).
  std::vector<at::Tensor> outputs = package_->run(tensors, /*stream_handle=*/nullptr);
  if (package_returns_tensor_ && outputs.size() == 1) return outputs[0];
  return c10::ivalue::Tuple::create(std::vector<c10::IValue>(outputs.begin(), outputs.end()));
}

std::vector<std::string> Model::input_names() const {
  std::vector<std::string> names;
  if (module_) {
    for (const auto& a : forward_arguments(*module_)) names.push_back(a.name());
  } else {
    for (size_t i = 0; i < package_inputs_; ++i) names.push_back("in" + std::to_string(i));
  }
  return names;
}

std::string Model::signature() const {
  if (!module_) return count_text(package_inputs_, "tensor");
  std::string out;
  for (const auto& a : forward_arguments(*module_)) {
    out += (out.empty() ? "" : ", ") + a.name() + ": " + a.type()->annotation_str();
    if (a.default_value()) {
      std::ostringstream value;
      value << *a.default_value();
      out += " = " + value.str();
    }
  }
  return out;
}

void Model::check_inputs(const Inputs& inputs) const {
  const size_t given = inputs.args.size() + inputs.kwargs.size();
  if (!module_) {
    const std::string takes = printable(path_) + ": the package takes " + count_text(package_inputs_, "input tensor");
    if (!inputs.kwargs.empty()) throw UsageError(takes + ", by position; inputs by name do not apply");
    if (given != package_inputs_) throw UsageError(takes + ", but " + given_text(given));
    for (size_t i = 0; i < inputs.args.size(); ++i) {
      if (!inputs.args[i].isTensor()) {
        throw UsageError(takes + "; input " + std::to_string(i) + " is a " + inputs.args[i].tagKind());
      }
    }
    return;
  }
  const std::vector<c10::Argument> arguments = forward_arguments(*module_);
  size_t required = 0;
  for (const auto& a : arguments) required += a.default_value() ? 0 : 1;
  const std::string takes = printable(path_) + ": forward takes " +
                            (required == arguments.size() ? count_text(required, "input")
                                                          : std::to_string(required) + " to " + count_text(arguments.size(), "input")) +
                            " (" + signature() + ")";
  if (inputs.args.size() > arguments.size() || (inputs.kwargs.empty() && given < required)) {
    throw UsageError(takes + ", but " + given_text(given));
  }
  for (const auto& [name, value] : inputs.kwargs) {
    const auto it = std::find_if(arguments.begin(), arguments.end(), [&](const c10::Argument& a) { return a.name() == name; });
    if (it == arguments.end()) throw UsageError(takes + "; it has no argument '" + printable(name) + "'");
    if (static_cast<size_t>(it - arguments.begin()) < inputs.args.size()) {
      throw UsageError(takes + "; argument '" + printable(name) + "' is given twice");
    }
  }
  for (size_t i = inputs.args.size(); i < arguments.size(); ++i) {
    if (!arguments[i].default_value() && !inputs.kwargs.count(arguments[i].name())) {
      throw UsageError(takes + "; argument '" + arguments[i].name() + "' is missing");
    }
  }
  std::vector<c10::IValue> stack{module_->_ivalue()};
  stack.insert(stack.end(), inputs.args.begin(), inputs.args.end());
  try {
    module_->get_method("forward").function().getSchema().checkAndNormalizeInputs(stack, inputs.kwargs);
  } catch (const c10::Error& e) {
    throw UsageError(printable(path_) + ": " + hypatia::error_line(e.what_without_backtrace()));
  }
}

std::optional<int64_t> Model::infer_features() const {
  if (!module_) return std::nullopt;
  for (const auto& p : module_->named_parameters(/*recurse=*/true)) {
    if (p.value.dim() == 2) return p.value.size(1);
    if (p.value.dim() == 1) return p.value.size(0);
    return std::nullopt;
  }
  const auto graph = module_->get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  if (graph->inputs().size() < 2) return std::nullopt;
  torch::jit::Value* input = graph->inputs()[1];
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->inputs().empty() || node->input(0) != input) continue;
    const auto kind = node->kind();
    if (kind == c10::aten::linear || kind == hypatia::fused_linear_relu_symbol() || kind == hypatia::fused_mlp_symbol()) {
      return weight_in_features(node->input(1));
    }
    if (kind == c10::aten::layer_norm) return last_constant_int(node->input(1));
  }
  return std::nullopt;
}

NodeCounts Model::hypatia_nodes() const {
  NodeCounts counts;
  if (module_) {
    const auto graph = module_->get_method("forward").graph()->copy();
    torch::jit::Inline(*graph);
    for (torch::jit::Node* node : hypatia::fused_nodes(*graph->block())) {
      ++(node->kind() == hypatia::fused_mlp_symbol() ? counts.mlp : counts.linear_relu);
    }
    return counts;
  }
  // The package's extern kernel nodes: data/aotinductor/model/<name>.json, beside the .so.
  caffe2::serialize::PyTorchStreamReader reader(path_);
  for (const std::string& name : reader.getAllRecords()) {
    const bool nodes = name.rfind("data/aotinductor/model/", 0) == 0 && name.size() > 5 &&
                       name.compare(name.size() - 5, 5, ".json") == 0 && name.find("_metadata.json") == std::string::npos;
    if (!nodes) continue;
    const auto [data, size] = reader.getRecord(name);
    const std::string text(static_cast<const char*>(data.get()), size);
    counts.linear_relu += static_cast<int>(count_of(text, "\"target\": \"hypatia::fused_linear_relu\""));
    counts.mlp += static_cast<int>(count_of(text, "\"target\": \"hypatia::fused_mlp\""));
  }
  return counts;
}

}  // namespace hypatia::run
