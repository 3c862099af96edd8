#pragma once
// Model and tensor files as the apps and fuse_file read and write them: loaded with every tensor
// checked against its storage before anything touches it, saved atomically; and the tensors a
// loaded TorchScript module holds, found wherever they are, moved and cast in place.
//
// Why the checks: torch::jit::load trusts the file. A storage gets the buffer of its archive
// record but the size its pickle declares (numel * itemsize), and a tensor gets the sizes,
// strides and offset its pickle declares, unchecked; a crafted or corrupted file then makes the
// first reader of the tensor (a pass, a kernel, Module::save) read past the buffer.
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
// included: "attribute layers.0.weight"), then the tensor constants of every function of its
// compilation unit, in all blocks ("constant 2 of __torch__.Net.forward"): frozen weights live there.
void for_each_tensor(const torch::jit::Module& module, const TensorVisitor& visit);

// Moves every tensor of `module` to `device` and casts the floating-point ones to `dtype`, in
// place (Tensor::set_data, as Module::to does for parameters), graph constants included, whose
// types are updated: unlike Module::to, which reaches parameters and buffers only.
void convert_module(torch::jit::Module& module, c10::Device device, std::optional<at::ScalarType> dtype);

// Throws c10::Error (one printable line naming the tensor, e.g. "attribute fc.weight: ...")
// unless every tensor `module` holds (for_each_tensor) lies inside its storage: sizes >= 0,
// offset >= 0, and every element its sizes, strides and offset reach within the storage's bytes;
// sparse tensors' indices within their sizes. Zero-element tensors need no bytes.
void check_tensors(const torch::jit::Module& module);
void check_tensors(const c10::IValue& value, const std::string& name);

// Loads the TorchScript file `path` on the CPU and checks it: every storage at most as large as
// the archive record that holds its bytes, then check_tensors. Throws c10::Error with one
// printable line when `path` is not a readable regular file, not a TorchScript archive, or
// holds a tensor that does not fit its storage. The file's debug files (code/*.debug_pkl, the
// original Python source ranges of its code) are not read: tracebacks point into the code
// itself, and a module saved again gets debug files for that code.
torch::jit::Module load_module(const std::string& path);

// Loads what torch.save wrote to `path` (any pickled value of tensors, lists, tuples, dicts,
// numbers and strings) on the CPU, checked as load_module checks a model.
c10::IValue load_values(const std::string& path);

// Saves `module` to `path` atomically: into a temporary file in the same directory, flushed to
// disk, then renamed over `path`, so that `path` is either the whole model or left as it was.
// Refuses (c10::Error, one line) when `path` is a directory or the same file as `input`.
void save_module(const torch::jit::Module& module, const std::string& path, const std::string& input = {});

// Writes `contents` to `path` as save_module writes a model; refuses the same paths and also
// `other` (e.g. hypatia-fuse's output, for its report).
void write_file(const std::string& path, const std::string& contents, const std::string& input = {},
                const std::string& other = {});

// Throws c10::Error when `path` could not be written as an output: a directory, or the same
// file as `input` or `other` (hard and symbolic links included). Paths that do not exist pass.
void check_output_path(const std::string& path, const std::string& input, const std::string& other = {});

}  // namespace hypatia
