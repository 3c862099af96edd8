// hypatia-run's inputs (apps/run_inputs.h).
#include "apps/run_inputs.h"

#include "io/model_file.h"
#include "io/text.h"

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <c10/util/Exception.h>

#include <limits>
#include <utility>

namespace hypatia::run {
namespace {

struct DtypeName {
  const char* name;
  at::ScalarType dtype;
};

// The first name of each dtype is the one printed.
constexpr DtypeName kDtypeNames[] = {
    {"float32", at::kFloat},  {"float", at::kFloat},    {"fp32", at::kFloat},     {"float64", at::kDouble},
    {"double", at::kDouble},  {"fp64", at::kDouble},    {"float16", at::kHalf},   {"half", at::kHalf},
    {"fp16", at::kHalf},      {"bfloat16", at::kBFloat16}, {"bf16", at::kBFloat16}, {"int64", at::kLong},
    {"long", at::kLong},      {"int32", at::kInt},      {"int", at::kInt},        {"int16", at::kShort},
    {"short", at::kShort},    {"int8", at::kChar},      {"uint8", at::kByte},     {"bool", at::kBool},
};

// A decimal integer, all of `text` (a leading '-' allowed where `sign`).
std::optional<int64_t> parse_int(const std::string& text, bool sign) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  size_t digits = 0;
  if (sign && text[0] == '-') digits = 1;
  if (digits == text.size()) return std::nullopt;
  for (size_t i = digits; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
  }
  try {
    return std::stoll(text);
  } catch (const std::exception&) {  // out of range
    return std::nullopt;
  }
}

std::vector<std::string> split(const std::string& text, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at = text.find(sep); at != std::string::npos; at = text.find(sep, start)) {
    parts.push_back(text.substr(start, at - start));
    start = at + sep.size();
  }
  parts.push_back(text.substr(start));
  return parts;
}

// The range of values of an integer dtype.
std::pair<int64_t, int64_t> integer_limits(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte: return {0, 255};
    case at::kChar: return {-128, 127};
    case at::kShort: return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
    case at::kInt: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default: return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

bool is_integer(at::ScalarType dtype) {
  return at::isIntegralType(dtype, /*includeBool=*/false);
}

}  // namespace

std::optional<at::ScalarType> parse_dtype(const std::string& name) {
  for (const auto& entry : kDtypeNames) {
    if (name == entry.name) return entry.dtype;
  }
  return std::nullopt;
}

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& entry : kDtypeNames) {
    if (dtype == entry.dtype) return entry.name;
  }
  return c10::toString(dtype);
}

InputSpec parse_input_spec(const std::string& text) {
  const std::string where = "--input '" + printable(text) + "': ";
  const std::vector<std::string> parts = split(text, ":");
  if (parts.size() > 3) {
    throw UsageError(where + "expected SHAPE[:DTYPE[:LOW..HIGH]], e.g. 8x3x224x224 or 8x128:int64:0..30000");
  }
  InputSpec spec;
  int64_t numel = 1;
  for (const std::string& dim : split(parts[0], "x")) {
    const std::optional<int64_t> size = parse_int(dim, /*sign=*/false);
    if (!size) {
      throw UsageError(where + "bad shape '" + printable(parts[0]) +
                       "' (expected sizes >= 0 joined by 'x', e.g. 8x3x224x224)");
    }
    if (__builtin_mul_overflow(numel, *size, &numel) || numel > (int64_t{1} << 40)) {
      throw UsageError(where + "shape '" + parts[0] + "' has too many elements");
    }
    spec.shape.push_back(*size);
  }
  if (parts.size() > 1) {
    const std::optional<at::ScalarType> dtype = parse_dtype(parts[1]);
    if (!dtype) {
      throw UsageError(where + "unknown dtype '" + printable(parts[1]) +
                       "' (float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8 or bool)");
    }
    spec.dtype = *dtype;
  }
  if (parts.size() > 2) {
    if (!is_integer(spec.dtype)) {
      throw UsageError(where + "a LOW..HIGH range applies to integer dtypes only (" + dtype_name(spec.dtype) +
                       (spec.dtype == at::kBool ? " inputs are false or true)" : " inputs are drawn from N(0, 1))"));
    }
    const std::vector<std::string> bounds = split(parts[2], "..");
    const std::optional<int64_t> low = bounds.size() == 2 ? parse_int(bounds[0], true) : std::nullopt;
    const std::optional<int64_t> high = bounds.size() == 2 ? parse_int(bounds[1], true) : std::nullopt;
    if (!low || !high || *low >= *high) {
      throw UsageError(where + "bad range '" + printable(parts[2]) +
                       "' (expected LOW..HIGH, integers with LOW < HIGH: values are drawn from [LOW, HIGH))");
    }
    const auto [min, max] = integer_limits(spec.dtype);
    if (*low < min || *high - 1 > max) {
      throw UsageError(where + "range " + parts[2] + " does not fit " + dtype_name(spec.dtype) + " (" +
                       std::to_string(min) + ".." + std::to_string(max) + ", HIGH excluded)");
    }
    spec.low = *low;
    spec.high = *high;
  }
  return spec;
}

std::string spec_text(const InputSpec& spec) {
  std::string out;
  for (size_t i = 0; i < spec.shape.size(); ++i) out += (i ? "x" : "") + std::to_string(spec.shape[i]);
  out += ":" + dtype_name(spec.dtype);
  if (is_integer(spec.dtype)) out += ":" + std::to_string(spec.low) + ".." + std::to_string(spec.high);
  return out;
}

at::Tensor make_input(const InputSpec& spec, at::Generator& generator, c10::Device device,
                      std::optional<at::ScalarType> dtype) {
  at::Tensor t;
  if (at::isFloatingType(spec.dtype)) {
    // Drawn in float32 whatever the dtype, so that --dtype rounds the same values.
    t = at::randn(spec.shape, generator, at::TensorOptions().dtype(at::kFloat)).to(dtype ? *dtype : spec.dtype);
  } else if (spec.dtype == at::kBool) {
    t = at::randint(0, 2, spec.shape, generator, at::TensorOptions().dtype(at::kLong)).to(at::kBool);
  } else {
    t = at::randint(spec.low, spec.high, spec.shape, generator, at::TensorOptions().dtype(at::kLong)).to(spec.dtype);
  }
  return t.to(device);
}

c10::IValue convert_value(const c10::IValue& value, c10::Device device, std::optional<at::ScalarType> dtype) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined()) return value;
    return t.to(device, dtype && t.is_floating_point() ? *dtype : t.scalar_type());
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& e : value.toTupleRef().elements()) elements.push_back(convert_value(e, device, dtype));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isList()) {
    c10::impl::GenericList list(value.toList().elementType());
    for (const auto& e : value.toListRef()) list.push_back(convert_value(e, device, dtype));
    return list;
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) out.insert(entry.key(), convert_value(entry.value(), device, dtype));
    return out;
  }
  return value;
}

Inputs load_inputs(const std::string& path, c10::Device device, std::optional<at::ScalarType> dtype) {
  const c10::IValue value = convert_value(hypatia::load_values(path), device, dtype);
  Inputs inputs;
  if (value.isTensor()) {
    inputs.args.push_back(value);
  } else if (value.isTuple()) {
    inputs.args = value.toTupleRef().elements().vec();
  } else if (value.isList()) {
    inputs.args = value.toListRef().vec();
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      if (!entry.key().isString()) {
        throw UsageError("--inputs '" + printable(path) + "': a dict of inputs needs string keys (argument names)");
      }
      inputs.kwargs.emplace(entry.key().toStringRef(), entry.value());
    }
  } else {
    throw UsageError("--inputs '" + printable(path) + "' holds a " + value.tagKind() +
                     "; expected a tensor, a tuple or list of inputs, or a dict of them by argument name");
  }
  return inputs;
}

std::string describe(const c10::IValue& value) {
  if (value.isTensor() && value.toTensor().defined()) {
    const at::Tensor& t = value.toTensor();
    std::string shape = "[";
    for (int64_t i = 0; i < t.dim(); ++i) shape += (i ? ", " : "") + std::to_string(t.size(i));
    return shape + "] " + dtype_name(t.scalar_type());
  }
  return value.type()->annotation_str();
}

}  // namespace hypatia::run
