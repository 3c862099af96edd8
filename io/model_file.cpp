// Loading TorchScript and torch.save files, and the tensors a module holds (io/model_file.h).
// Messages are built by string concatenation (io/text.cpp says why).
#include "io/model_file.h"

#include "io/text.h"

#include <ATen/ops/_validate_sparse_compressed_tensor_args.h>
#include <ATen/ops/_validate_sparse_coo_tensor_args.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace hypatia {
namespace {

// Deeper nesting than any model has; a crafted file could nest until the stack overflows.
constexpr int kMaxDepth = 200;

// The one attribute of the placeholder classes of scan_archive.
constexpr const char* kStateSlot = "__state__";

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
        // The objects of an archive scan (scan_archive) hold their pickled state in one slot.
        value(object.getSlot(i), name == kStateSlot ? where : join(where, name), depth + 1);
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

// The size of each storage buffer the archive scan made, by its data pointer.
using RecordSizes = std::unordered_map<const void*, size_t>;

std::string ints_text(c10::IntArrayRef values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  C10_THROW_ERROR(Error, where + ": " + what);
}

// A strided tensor lies inside its storage (and, where its record's size is known, the storage
// inside its record). In elements: the lowest index reached is offset + sum of (size - 1) * stride
// over the negative strides, the highest offset + the same over the positive ones (TensorImpl
// makes negative strides from a file contiguous ones, but the check does not rely on it).
void check_strided(const std::string& where, const at::Tensor& t, const RecordSizes* records) {
  const std::string what = std::string(c10::toString(t.scalar_type())) + " tensor of sizes " + ints_text(t.sizes()) +
                           ", strides " + ints_text(t.strides()) + " and offset " + std::to_string(t.storage_offset());
  bool empty = false;
  for (const int64_t size : t.sizes()) {
    if (size < 0) fail(where, what + " has a negative size");
    empty = empty || size == 0;
  }
  const int64_t offset = t.storage_offset();
  if (offset < 0) fail(where, what + " has a negative offset");
  const c10::Storage& storage = t.storage();
  const size_t storage_bytes = storage.nbytes();
  if (storage_bytes > static_cast<size_t>(std::numeric_limits<int64_t>::max())) {
    fail(where, "its storage declares a negative size");
  }
  if (records != nullptr && storage.data() != nullptr) {
    const auto buffer = records->find(storage.data());
    if (buffer != records->end() && buffer->second < storage_bytes) {
      fail(where, "its storage declares " + std::to_string(storage_bytes) + " bytes but the file holds " +
                      std::to_string(buffer->second));
    }
  }
  if (empty) return;
  int64_t low = offset;
  int64_t high = offset;
  bool overflow = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t span = 0;
    overflow = overflow || __builtin_mul_overflow(t.size(d) - 1, t.stride(d), &span);
    overflow = overflow || __builtin_add_overflow(span < 0 ? low : high, span, span < 0 ? &low : &high);
  }
  int64_t needed = 0;
  overflow = overflow || __builtin_add_overflow(high, 1, &needed) ||
             __builtin_mul_overflow(needed, static_cast<int64_t>(t.element_size()), &needed);
  if (overflow) fail(where, what + " reaches past any storage (its extent overflows)");
  if (low < 0) fail(where, what + " reaches before the start of its storage");
  if (static_cast<uint64_t>(needed) > storage_bytes) {
    fail(where, what + " needs " + std::to_string(needed) + " bytes of storage, which has " + std::to_string(storage_bytes));
  }
  if (storage.data() == nullptr) fail(where, what + " has no data");
}

void check_tensor(const std::string& where, const at::Tensor& t, const RecordSizes* records) {
  if (t.is_meta()) return;  // no data
  const at::Layout layout = t.layout();
  if (layout == at::kStrided) {
    check_strided(where, t, records);
    if (t.is_quantized() && t.qscheme() != at::kPerTensorAffine && t.qscheme() != at::kPerTensorSymmetric) {
      check_strided(where + " (scales)", t.q_per_channel_scales(), records);
      check_strided(where + " (zero points)", t.q_per_channel_zero_points(), records);
    }
    return;
  }
  try {
    if (layout == at::kSparse) {
      check_strided(where + " (indices)", t._indices(), records);
      check_strided(where + " (values)", t._values(), records);
      at::_validate_sparse_coo_tensor_args(t._indices(), t._values(), t.sizes());
      return;
    }
    if (layout == at::kSparseCsr || layout == at::kSparseBsr || layout == at::kSparseCsc || layout == at::kSparseBsc) {
      const bool rows = layout == at::kSparseCsr || layout == at::kSparseBsr;
      const at::Tensor compressed = rows ? t.crow_indices() : t.ccol_indices();
      const at::Tensor plain = rows ? t.col_indices() : t.row_indices();
      check_strided(where + " (compressed indices)", compressed, records);
      check_strided(where + " (plain indices)", plain, records);
      check_strided(where + " (values)", t.values(), records);
      at::_validate_sparse_compressed_tensor_args(compressed, plain, t.values(), t.sizes(), layout);
      return;
    }
  } catch (const c10::Error& e) {
    fail(where, error_line(e.what_without_backtrace()));
  }
  fail(where, std::string("a tensor of layout ") + c10::toString(layout) + ", which cannot be checked");
}

}  // namespace

void for_each_tensor(const c10::IValue& value, const std::string& name, const TensorVisitor& visit) {
  Walker(visit).value(value, name);
}

void for_each_tensor(const torch::jit::Module& module, const TensorVisitor& visit) {
  const TensorVisitor attribute = [&](const std::string& where, const at::Tensor& t) { visit("attribute " + where, t); };
  Walker(attribute).value(module._ivalue(), "");
  Walker walker(visit);
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

void check_tensors(const torch::jit::Module& module) {
  for_each_tensor(module, [](const std::string& where, const at::Tensor& t) { check_tensor(where, t, nullptr); });
}

void check_tensors(const c10::IValue& value, const std::string& name) {
  for_each_tensor(value, name, [](const std::string& where, const at::Tensor& t) { check_tensor(where, t, nullptr); });
}

namespace {

// The pickle `archive`.pkl of the archive `reader` reads (a TorchScript file's "constants" or
// "data", a torch.save file's "data"), parsed by torch's own Unpickler but without the archive's
// code: classes become objects holding their state in one slot, and each storage gets a
// zero-filled buffer of its record's size (calloc: pages never touched cost nothing), whose size
// goes into `records`. Its tensors are then those the loader will make from the same bytes, with
// the record sizes the loader does not keep.
c10::IValue scan_archive(caffe2::serialize::PyTorchStreamReader& reader, const std::string& archive, RecordSizes& records) {
  const auto [pickle, pickle_size] = reader.getRecord(archive + ".pkl");
  size_t read = 0;
  auto read_pickle = [&, data = static_cast<const char*>(pickle.get())](char* buffer, size_t n) -> size_t {
    n = std::min(pickle_size - read, n);
    std::memcpy(buffer, data + read, n);
    read += n;
    return n;
  };
  auto read_record = [&](const std::string& key) -> at::DataPtr {
    const size_t size = reader.getRecordSize(archive + "/" + key);
    void* data = std::calloc(std::max<size_t>(size, 1), 1);
    TORCH_CHECK(data != nullptr, "cannot allocate " + std::to_string(size) + " bytes for record " + archive + "/" + key);
    records[data] = size;
    return at::DataPtr(data, data, &std::free, c10::Device(c10::kCPU));
  };
  const auto cu = std::make_shared<torch::jit::CompilationUnit>();
  std::unordered_map<std::string, c10::TypePtr> types;
  auto resolve = [&](const c10::QualifiedName& name) -> c10::StrongTypePtr {
    const std::string text = name.qualifiedName();
    c10::TypePtr& type = types[text];
    if (!type) {
      // Container type tags: the element types do not matter here.
      if (text.rfind("List[", 0) == 0) {
        type = c10::ListType::create(c10::AnyType::get());
      } else if (text.rfind("Dict[", 0) == 0) {
        type = c10::DictType::create(c10::AnyType::get(), c10::AnyType::get());
      } else {
        auto cls = c10::ClassType::create(name, cu);
        cls->addAttribute(kStateSlot, c10::AnyType::get());
        type = cls;
      }
    }
    return c10::StrongTypePtr(cu, type);
  };
  auto load_object = [](const c10::StrongTypePtr& type, c10::IValue state) {
    auto object = c10::ivalue::Object::create(type, 1);
    object->setSlot(0, std::move(state));
    return object;
  };
  torch::jit::Unpickler unpickler(read_pickle, resolve, load_object, read_record, c10::Device(c10::kCPU));
  unpickler.set_version(reader.version());
  return unpickler.parse_ivalue();
}

// A tensor that does not fit its storage, or a storage its record: the file is corrupt.
struct CorruptFile : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Checks `path` before torch's loader reads it (the loader trusts it: see io/model_file.h): each
// of its pickles `archives` is scanned and every tensor in it checked against its storage, and
// every storage against its record; the loader's own parse then makes the same tensors.
void check_archive(const std::string& path, const std::vector<std::string>& archives) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  // Pre-1.4 TorchScript files describe their tensors in model.json, which the loader reads by
  // another path.
  TORCH_CHECK(!reader.hasRecord("model.json"), "the legacy TorchScript format (model.json) is not supported");
  for (const std::string& archive : archives) {
    RecordSizes records;
    const c10::IValue value = scan_archive(reader, archive, records);
    try {
      for_each_tensor(value, archive, [&](const std::string& where, const at::Tensor& t) { check_tensor(where, t, &records); });
    } catch (const c10::Error& e) {
      throw CorruptFile(e.what_without_backtrace());
    }
  }
}

// A regular file that can be opened for reading: a clear message for the rest.
void check_input_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  TORCH_CHECK(!ec || ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory,
              "cannot open it: " + ec.message());
  TORCH_CHECK(std::filesystem::exists(status), "file not found");
  TORCH_CHECK(!std::filesystem::is_directory(status), "it is a directory");
  TORCH_CHECK(std::filesystem::is_regular_file(status), "it is not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, std::string("cannot open it: ") + std::strerror(errno));
  ::close(fd);
}

// The loader's message without the sentence PyTorchStreamReader appends to every zip error
// ("This is an internal miniz error. If you are seeing this error, ...").
std::string loader_error(const std::string& message) {
  const std::string line = error_line(message);
  const size_t boilerplate = line.find(" This is an internal miniz error.");
  return boilerplate == std::string::npos ? line : line.substr(0, boilerplate);
}

// check_archive, then `load`, then every tensor of what it loaded (`for_each`) checked again.
// Errors are one line: "cannot load 'PATH' as AS: ..." or "'PATH' is corrupt: ...".
template <typename Loaded, typename Load, typename ForEach>
Loaded load_checked(const std::string& path, const std::string& as, const std::vector<std::string>& archives, Load load,
                    ForEach for_each) {
  const std::string cannot = "cannot load '" + printable(path) + "' as " + as + ": ";
  const std::string corrupt = "'" + printable(path) + "' is corrupt: ";
  Loaded loaded;
  try {
    check_input_file(path);
    check_archive(path, archives);
    loaded = load();
    for_each(loaded, [](const std::string& where, const at::Tensor& t) {
      try {
        check_tensor(where, t, nullptr);
      } catch (const c10::Error& e) {
        throw CorruptFile(e.what_without_backtrace());
      }
    });
  } catch (const CorruptFile& e) {
    C10_THROW_ERROR(Error, corrupt + error_line(e.what()));
  } catch (const c10::Error& e) {
    C10_THROW_ERROR(Error, cannot + loader_error(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    C10_THROW_ERROR(Error, cannot + loader_error(e.what()));
  }
  return loaded;
}

}  // namespace

torch::jit::Module load_module(const std::string& path) {
  torch::jit::Module module = load_checked<torch::jit::Module>(
      path, "a TorchScript model", {"constants", "data"},
      // Without the debug files (code/*.debug_pkl: source ranges for tracebacks), which torch parses
      // lazily, unchecked, when the code is printed again: a corrupt one crashed Module::save.
      [&] { return torch::jit::load(path, c10::Device(c10::kCPU), /*load_debug_files=*/false); },
      [](const torch::jit::Module& m, const TensorVisitor& visit) { for_each_tensor(m, visit); });
  module.eval();
  return module;
}

c10::IValue load_values(const std::string& path) {
  return load_checked<c10::IValue>(
      path, "a torch.save file", {"data"},
      [&] {
        std::ifstream file(path, std::ios::binary);
        const std::vector<char> data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
        TORCH_CHECK(!file.bad(), "read error");
        return torch::jit::pickle_load(data);
      },
      [](const c10::IValue& value, const TensorVisitor& visit) { for_each_tensor(value, "value", visit); });
}

namespace {

// The process's umask, without changing it (umask(2) can only be read by setting it, which
// races with other threads creating files).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  }
  return 022;
}

// The same file (links included), or two names of one file yet to be made.
bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  const auto canonical_a = std::filesystem::weakly_canonical(a, ec);
  if (ec) return false;
  const auto canonical_b = std::filesystem::weakly_canonical(b, ec);
  return !ec && canonical_a == canonical_b;
}

// Writes through `write(temporary_path)` into a new file beside `path`, then renames it over
// `path`; on any failure the temporary file is removed and `path` is left as it was.
template <typename Write>
void write_atomically(const std::string& path, Write write) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string temporary = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  const std::string cannot = "cannot write '" + printable(path) + "': ";
  const int fd = ::mkstemp(temporary.data());
  TORCH_CHECK(fd >= 0, cannot + std::strerror(errno));
  std::string error;
  try {
    write(temporary);
    // A regular file's mode, not mkstemp's 0600; flushed before the rename makes it visible.
    if (::fchmod(fd, 0666 & ~current_umask()) != 0 || ::fsync(fd) != 0) error = std::strerror(errno);
  } catch (const c10::Error& e) {
    error = error_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    error = error_line(e.what());
  }
  ::close(fd);
  if (error.empty() && std::rename(temporary.c_str(), path.c_str()) != 0) error = std::strerror(errno);
  if (!error.empty()) {
    std::remove(temporary.c_str());
    C10_THROW_ERROR(Error, cannot + error);
  }
}

}  // namespace

void check_output_path(const std::string& path, const std::string& input, const std::string& other) {
  std::error_code ec;
  TORCH_CHECK(!std::filesystem::is_directory(path, ec), "output '" + printable(path) + "' is a directory");
  TORCH_CHECK(!same_file(path, input), "output '" + printable(path) + "' is the input file; write to another path");
  TORCH_CHECK(!same_file(path, other), "output '" + printable(path) + "' is the same file as '" + printable(other) + "'");
}

void save_module(const torch::jit::Module& module, const std::string& path, const std::string& input) {
  check_output_path(path, input);
  write_atomically(path, [&](const std::string& temporary) { module.save(temporary); });
}

void write_file(const std::string& path, const std::string& contents, const std::string& input, const std::string& other) {
  check_output_path(path, input, other);
  write_atomically(path, [&](const std::string& temporary) {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    file.close();
    TORCH_CHECK(file.good(), "write error");
  });
}

}  // namespace hypatia
