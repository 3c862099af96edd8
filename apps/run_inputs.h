#pragma once
// hypatia-run's inputs: --input SHAPE[:DTYPE[:LOW..HIGH]] specs, the random tensors they describe,
// and --inputs FILE (what torch.save wrote).
#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace hypatia::run {

// A bad command line (or one that does not fit the model): exit code 2. Other failures exit with 1.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One --input: a tensor of `shape` and `dtype`; floating-point ones are drawn from N(0, 1),
// integer ones uniformly from [low, high), bool ones from {false, true}.
struct InputSpec {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  int64_t low = 0;
  int64_t high = 2;
};

// Parses "8x3x224x224", "8x128:int64:0..30000", ... Throws UsageError naming what is wrong.
InputSpec parse_input_spec(const std::string& text);

// float32/float/fp32, float64/double/fp64, float16/half/fp16, bfloat16/bf16, int64/long,
// int32/int, int16/short, int8, uint8, bool; nullopt for another name.
std::optional<at::ScalarType> parse_dtype(const std::string& name);
std::string dtype_name(at::ScalarType dtype);  // the first of those names

// "8x3x224x224:float32", with ":LOW..HIGH" for integer specs.
std::string spec_text(const InputSpec& spec);

// The tensor `spec` describes, drawn on the CPU from `generator` (so that a seed gives the same
// input on every device), then cast to `dtype` if floating-point and given, and moved to `device`.
at::Tensor make_input(const InputSpec& spec, at::Generator& generator, c10::Device device,
                      std::optional<at::ScalarType> dtype);

// Positional and keyword arguments of a forward call.
struct Inputs {
  std::vector<c10::IValue> args;
  std::unordered_map<std::string, c10::IValue> kwargs;
};

// --inputs FILE: a tensor (one argument), a tuple or list (positional arguments) or a dict with
// string keys (arguments by name), as torch.save wrote it; floating-point tensors are cast to
// `dtype` if given and every tensor is moved to `device`.
Inputs load_inputs(const std::string& path, c10::Device device, std::optional<at::ScalarType> dtype);

// Every tensor of `value` (recursively through lists, tuples and dicts) moved to `device`, and cast
// to `dtype` if floating-point and given.
c10::IValue convert_value(const c10::IValue& value, c10::Device device, std::optional<at::ScalarType> dtype);

// "[8, 3, 224, 224] float32" for a tensor, the type's name for another value.
std::string describe(const c10::IValue& value);

}  // namespace hypatia::run
