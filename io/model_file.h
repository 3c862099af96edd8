#pragma once
// Model and tensor files as the apps and fuse_file read and write them: the tensors a loaded
// TorchScript module holds, found wherever they are, moved and cast in place.
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <optional>
#include <string>

namespace hypatia {

using TensorVisitor = std::function<void(const std::string& where, const at::Tensor& tensor)>;

// Calls visit(where, tensor) on every defined tensor inside `value`, recursively through lists,
// tuples, dicts (keys too) and objects; `where` is `name` with the path to the tensor
// ("layers.0.weight", "weights[1]").
void for_each_tensor(const c10::IValue& value, const std::string& name, const TensorVisitor& visit);

// Every tensor `module` holds: its attributes (parameters, buffers and the rest, submodules
// included), then the tensor constants of every function of its compilation unit, in all blocks
// ("constant 2 of __torch__.Net.forward"): frozen weights live there.
void for_each_tensor(const torch::jit::Module& module, const TensorVisitor& visit);

// Moves every tensor of `module` to `device` and casts the floating-point ones to `dtype`, in
// place (Tensor::set_data, as Module::to does for parameters), graph constants included, whose
// types are updated: unlike Module::to, which reaches parameters and buffers only.
void convert_module(torch::jit::Module& module, c10::Device device, std::optional<at::ScalarType> dtype);

// Loads the TorchScript file `path` on the CPU. Throws c10::Error with one printable line when
// it is not a readable regular file or not a TorchScript archive.
torch::jit::Module load_module(const std::string& path);

// Loads what torch.save wrote to `path` (any pickled value of tensors, lists, tuples, dicts,
// numbers and strings), on the CPU. Throws c10::Error with one printable line when it cannot.
c10::IValue load_values(const std::string& path);

}  // namespace hypatia
