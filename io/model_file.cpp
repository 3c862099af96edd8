// Loading TorchScript and torch.save files, and the tensors a module holds (io/model_file.h).
// Messages are built by string concatenation (io/text.cpp says why).
#include "io/model_file.h"

#include "io/text.h"

#include <c10/util/Exception.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <unordered_set>
#include <vector>

namespace hypatia {
namespace {

// Deeper nesting than any model has; a crafted file could nest until the stack overflows.
constexpr int kMaxDepth = 200;

std::string key_text(const c10::IValue& key, size_t index) {
  if (key.isString()) return printable(key.toStringRef());
  if (key.isInt()) return std::to_string(key.toInt());
  return "#" + std::to_string(index);
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

class Walker {
 public:
  explicit Walker(const TensorVisitor& visit) : visit_(visit) {}

  void value(const c10::IValue& v, const std::string& where, int depth = 0) {
    TORCH_CHECK(depth <= kMaxDepth, where + " is nested more than " + std::to_string(kMaxDepth) + " levels deep");
    if (v.isTensor()) {
      if (v.toTensor().defined()) visit_(where, v.toTensor());
      return;
    }
    if (!(v.isList() || v.isTuple() || v.isGenericDict() || v.isObject())) return;
    if (!seen_.insert(v.internalToPointer()).second) return;  // shared, or a cycle
    if (v.isList()) {
      const auto elements = v.toListRef();
      for (size_t i = 0; i < elements.size(); ++i) value(elements[i], where + "[" + std::to_string(i) + "]", depth + 1);
    } else if (v.isTuple()) {
      const auto& elements = v.toTupleRef().elements();
      for (size_t i = 0; i < elements.size(); ++i) value(elements[i], where + "[" + std::to_string(i) + "]", depth + 1);
    } else if (v.isGenericDict()) {
      size_t i = 0;
      for (const auto& entry : v.toGenericDict()) {
        const std::string item = where + "[" + key_text(entry.key(), i++) + "]";
        value(entry.key(), item + " (key)", depth + 1);
        value(entry.value(), item, depth + 1);
      }
    } else {
      const c10::ivalue::Object& object = v.toObjectRef();
      const auto& type = object.type();
      for (size_t i = 0; i < object.slots().size(); ++i) {
        const std::string name = i < type->numAttributes() ? printable(type->getAttributeName(i)) : "#" + std::to_string(i);
        value(object.getSlot(i), join(where, name), depth + 1);
      }
    }
  }

 private:
  const TensorVisitor& visit_;
  std::unordered_set<const void*> seen_;
};

// Calls visit(node, index) on every prim::Constant node of every graph function of the
// module's compilation unit that holds a tensor (alone or in a list or tuple).
void for_each_tensor_constant(const torch::jit::Module& module,
                              const std::function<void(torch::jit::Node*, const std::string& where)>& visit) {
  const auto cu = module._ivalue()->compilation_unit();
  for (torch::jit::Function* function : cu->get_functions()) {
    if (!function->isGraphFunction()) continue;
    torch::jit::GraphFunction& graph_function = torch::jit::toGraphFunction(*function);
    graph_function.ensure_defined();
    const std::shared_ptr<torch::jit::Graph> graph = graph_function.graph();
    if (!graph) continue;
    const std::string name = printable(function->qualname().qualifiedName());
    int index = 0;
    std::vector<torch::jit::Block*> blocks{graph->block()};
    while (!blocks.empty()) {
      torch::jit::Block* block = blocks.back();
      blocks.pop_back();
      for (torch::jit::Node* node : block->nodes()) {
        for (torch::jit::Block* inner : node->blocks()) blocks.push_back(inner);
        if (node->kind() != c10::prim::Constant || node->outputs().size() != 1) continue;
        const auto type = node->output()->type();
        const bool holds_tensor = type->kind() == c10::TypeKind::TensorType || type->containedTypes().size() > 0;
        if (holds_tensor) visit(node, "constant " + std::to_string(index++) + " of " + name);
      }
    }
  }
}

}  // namespace

void for_each_tensor(const c10::IValue& value, const std::string& name, const TensorVisitor& visit) {
  Walker(visit).value(value, name);
}

void for_each_tensor(const torch::jit::Module& module, const TensorVisitor& visit) {
  Walker walker(visit);
  walker.value(module._ivalue(), "");
  for_each_tensor_constant(module, [&](torch::jit::Node* node, const std::string& where) {
    const std::optional<c10::IValue> constant = torch::jit::toIValue(node->output());
    if (constant) walker.value(*constant, where);
  });
}

void convert_module(torch::jit::Module& module, c10::Device device, std::optional<at::ScalarType> dtype) {
  for_each_tensor(module, [&](const std::string&, const at::Tensor& t) {
    const at::ScalarType target = dtype && t.is_floating_point() ? *dtype : t.scalar_type();
    if (t.device() != device || t.scalar_type() != target) t.set_data(t.to(device, target));
  });
  // The graph's own record of a constant's dtype and device, which optimisations read.
  for_each_tensor_constant(module, [](torch::jit::Node* node, const std::string&) {
    if (node->output()->type()->kind() == c10::TypeKind::TensorType) {
      node->output()->inferTypeFrom(node->t(c10::attr::value));
    }
  });
}

torch::jit::Module load_module(const std::string& path) {
  std::error_code ec;
  TORCH_CHECK(std::filesystem::is_regular_file(path, ec), "model file '" + printable(path) + "' not found");
  try {
    torch::jit::Module module = torch::jit::load(path, c10::Device(c10::kCPU));
    module.eval();
    return module;
  } catch (const c10::Error& e) {
    C10_THROW_ERROR(Error, "cannot load '" + printable(path) + "' as a TorchScript model: " + error_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    C10_THROW_ERROR(Error, "cannot load '" + printable(path) + "' as a TorchScript model: " + error_line(e.what()));
  }
}

c10::IValue load_values(const std::string& path) {
  std::error_code ec;
  TORCH_CHECK(std::filesystem::is_regular_file(path, ec), "file '" + printable(path) + "' not found");
  std::ifstream file(path, std::ios::binary);
  const std::vector<char> data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  TORCH_CHECK(file.good() || file.eof(), "cannot read '" + printable(path) + "'");
  try {
    return torch::jit::pickle_load(data);
  } catch (const c10::Error& e) {
    C10_THROW_ERROR(Error, "cannot load '" + printable(path) + "' as a torch.save file: " + error_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    C10_THROW_ERROR(Error, "cannot load '" + printable(path) + "' as a torch.save file: " + error_line(e.what()));
  }
}

}  // namespace hypatia
