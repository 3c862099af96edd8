// hypatia-run: loads a TorchScript model, runs it on a random input and, with --fuse (or
// --compare FILE), runs a second model on the same input: latency medians, speed ratio,
// hypatia node counts and the difference of the outputs.
//
// Linked with -Wl,--no-as-needed against libhypatia_ops.so: the hypatia:: ops register
// themselves from static initialisers, which must run before a model that calls them is loaded.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "passes/fuse.h"

namespace {

constexpr const char* kUsage =
    "usage: hypatia-run MODEL.pt [--fuse] [--freeze] [--no-mlp] [--compare OTHER.pt]\n"
    "                   [--device cpu|cuda|cuda:N] [--batch N] [--features N] [--iters N] [--warmup N]\n"
    "                   [--threads N] [--seed N]\n"
    "  Runs MODEL.pt on a random [batch, features] input and prints its median latency.\n"
    "  --fuse          also run a copy rewritten by hypatia::fuse and compare it with MODEL.pt\n"
    "  --freeze        freeze first (torch::jit::freeze); with --fuse both sides are frozen\n"
    "  --no-mlp        with --fuse: only fused_linear_relu, no fused_mlp chains\n"
    "  --compare F     also run the model in file F (e.g. written by hypatia-fuse) and compare;\n"
    "                  the two are timed in 5 rounds that take turns, --iters calls each in all\n"
    "  --features N    input features (default: inferred from the model's first layer)\n"
    "  --threads N     intra-op CPU threads (at::set_num_threads and OMP_NUM_THREADS)\n";

// Bad command lines: exit code 2 (a runtime failure is 1).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string model;
  std::optional<std::string> compare;
  bool fuse = false;
  bool freeze = false;
  bool mlp = true;
  c10::Device device = c10::kCPU;
  int64_t batch = 64;
  std::optional<int64_t> features;
  int64_t iters = 20;
  int64_t warmup = 3;  // the profiling graph executor optimises after its first runs
  std::optional<int64_t> threads;
  int64_t seed = 0;
};

int64_t parse_count(const std::string& flag, const std::string& text, int64_t min) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < min) {
    throw UsageError(flag + " expects an integer >= " + std::to_string(min) + ", got '" + text + "'");
  }
  return value;
}

// cpu, cuda (the current GPU) or cuda:N.
c10::Device parse_device(const std::string& text) {
  std::optional<c10::Device> device;
  try {
    device = c10::Device(text);
  } catch (const std::exception&) {
  }
  if (!device || !(device->is_cuda() || (device->is_cpu() && !device->has_index()))) {
    throw UsageError("--device expects cpu, cuda or cuda:N, got '" + text + "'");
  }
  return *device;
}

Options parse_args(int argc, char** argv) {
  Options opt;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(arg + " expects a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--fuse") {
      opt.fuse = true;
    } else if (arg == "--freeze") {
      opt.freeze = true;
    } else if (arg == "--no-mlp") {
      opt.mlp = false;
    } else if (arg == "--compare") {
      opt.compare = value();
    } else if (arg == "--device") {
      opt.device = parse_device(value());
    } else if (arg == "--batch") {
      opt.batch = parse_count(arg, value(), 1);
    } else if (arg == "--features") {
      opt.features = parse_count(arg, value(), 1);
    } else if (arg == "--iters") {
      opt.iters = parse_count(arg, value(), 1);
    } else if (arg == "--warmup") {
      opt.warmup = parse_count(arg, value(), 0);
    } else if (arg == "--threads") {
      opt.threads = parse_count(arg, value(), 1);
    } else if (arg == "--seed") {
      opt.seed = parse_count(arg, value(), 0);
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "'");
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 1) {
    throw UsageError("expected one model file, got " + std::to_string(positional.size()));
  }
  if (opt.fuse && opt.compare) throw UsageError("--fuse and --compare exclude each other");
  if (!opt.mlp && !opt.fuse) throw UsageError("--no-mlp only applies with --fuse");
  opt.model = positional[0];
  return opt;
}

torch::jit::Module load_model(const std::string& path, c10::Device device) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw std::runtime_error("model file '" + path + "' not found");
  }
  try {
    // map_location also moves the constants of frozen graphs, which Module::to cannot reach.
    torch::jit::Module module = torch::jit::load(path, device);
    module.eval();
    return module;
  } catch (const c10::Error& e) {
    throw std::runtime_error("cannot load '" + path + "' as a TorchScript model: " + e.what_without_backtrace());
  }
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

// The input width: from the first parameter (Linear weight [out, in] -> in, LayerNorm
// weight [d] -> d); for frozen models, whose parameters are graph constants, from the first
// layer that reads the input.
std::optional<int64_t> infer_features(const torch::jit::Module& module) {
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (p.value.dim() == 2) return p.value.size(1);
    if (p.value.dim() == 1) return p.value.size(0);
    return std::nullopt;
  }
  const auto graph = module.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  if (graph->inputs().size() < 2) return std::nullopt;
  torch::jit::Value* input = graph->inputs()[1];
  static const auto fused_linear_relu = c10::Symbol::fromQualString("hypatia::fused_linear_relu");
  static const auto fused_mlp = c10::Symbol::fromQualString("hypatia::fused_mlp");
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->inputs().empty() || node->input(0) != input) continue;
    const auto kind = node->kind();
    if (kind == c10::aten::linear || kind == fused_linear_relu || kind == fused_mlp) {
      return weight_in_features(node->input(1));
    }
    if (kind == c10::aten::layer_norm) return last_constant_int(node->input(1));
  }
  return std::nullopt;
}

struct NodeCounts {
  int linear_relu = 0;
  int mlp = 0;
};

void count_nodes(torch::jit::Block* block, NodeCounts& counts) {
  static const auto fused_linear_relu = c10::Symbol::fromQualString("hypatia::fused_linear_relu");
  static const auto fused_mlp = c10::Symbol::fromQualString("hypatia::fused_mlp");
  for (torch::jit::Node* node : block->nodes()) {
    if (node->kind() == fused_linear_relu) ++counts.linear_relu;
    if (node->kind() == fused_mlp) ++counts.mlp;
    for (torch::jit::Block* inner : node->blocks()) count_nodes(inner, counts);
  }
}

// hypatia nodes in forward, submodule calls inlined.
NodeCounts hypatia_nodes(const torch::jit::Module& module) {
  const auto graph = module.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  NodeCounts counts;
  count_nodes(graph->block(), counts);
  return counts;
}

struct Run {
  double median_ms = 0;
  double min_ms = 0;
  at::Tensor output;
};

at::Tensor forward(torch::jit::Module& module, const at::Tensor& input) {
  const c10::IValue out = module.forward({input});
  TORCH_CHECK(out.isTensor(), "hypatia-run: the model must return one Tensor, got ", out.tagKind());
  return out.toTensor();
}

// Appends the ms of `calls` timed forwards to `ms`. CUDA is timed with events on the current
// stream, so the figure is the device time of a forward, launches included.
void time_calls(torch::jit::Module& module, const at::Tensor& input, const Options& opt, int64_t calls, Run& run,
                std::vector<double>& ms) {
  if (opt.device.is_cuda()) {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::kCUDA);
    const c10::Stream stream = impl->getStream(opt.device);
    torch::cuda::synchronize();
    for (int64_t i = 0; i < calls; ++i) {
      c10::Event start(c10::kCUDA, c10::EventFlag::BACKEND_DEFAULT);
      c10::Event stop(c10::kCUDA, c10::EventFlag::BACKEND_DEFAULT);
      start.record(stream);
      run.output = forward(module, input);
      stop.record(stream);
      stop.synchronize();
      ms.push_back(start.elapsedTime(stop));
    }
  } else {
    for (int64_t i = 0; i < calls; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run.output = forward(module, input);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
}

// Median and min of `iters` timed forwards of each model after `warmup` untimed ones, timed in
// kRounds rounds that take turns (the first model's calls, the second's, the first's again...),
// so that a slow spell of a shared machine falls on both alike.
constexpr int64_t kRounds = 5;

std::vector<Run> time_forwards(const std::vector<torch::jit::Module*>& modules, const at::Tensor& input,
                               const Options& opt) {
  std::vector<Run> runs(modules.size());
  std::vector<std::vector<double>> ms(modules.size());
  for (torch::jit::Module* module : modules) {
    for (int64_t i = 0; i < opt.warmup; ++i) forward(*module, input);
  }
  for (int64_t round = 0; round < kRounds; ++round) {
    const int64_t calls = opt.iters * (round + 1) / kRounds - opt.iters * round / kRounds;  // opt.iters in all
    for (size_t m = 0; m < modules.size(); ++m) {
      time_calls(*modules[m], input, opt, calls, runs[m], ms[m]);
    }
  }
  for (size_t m = 0; m < modules.size(); ++m) {
    std::sort(ms[m].begin(), ms[m].end());
    const size_t n = ms[m].size();
    runs[m].median_ms = n % 2 ? ms[m][n / 2] : 0.5 * (ms[m][n / 2 - 1] + ms[m][n / 2]);
    runs[m].min_ms = ms[m].front();
  }
  return runs;
}

void print_run(const std::string& label, const Run& run, const NodeCounts& nodes) {
  std::printf("%s: median %.4f ms  min %.4f ms  hypatia nodes: fused_linear_relu=%d fused_mlp=%d\n",
              label.c_str(), run.median_ms, run.min_ms, nodes.linear_relu, nodes.mlp);
}

int run_main(const Options& opt) {
  if (opt.threads) {
    // OpenMP reads the variable when its pool starts; set_num_threads covers a started pool.
    setenv("OMP_NUM_THREADS", std::to_string(*opt.threads).c_str(), 1);
    at::set_num_threads(static_cast<int>(*opt.threads));
  }
  if (opt.device.is_cuda()) {
    const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    if (count == 0) {
      throw std::runtime_error("--device " + opt.device.str() + " given, but no CUDA device is available");
    }
    if (opt.device.index() >= count) {
      throw std::runtime_error(
          "--device " + opt.device.str() + " given, but " +
          (count == 1 ? std::string("the one CUDA device is cuda:0")
                      : "the " + std::to_string(count) + " CUDA devices are cuda:0 to cuda:" + std::to_string(count - 1)));
    }
  }
  // The chosen GPU is the current one from here on, as in an application serving from it.
  const c10::DeviceGuard device_guard(opt.device);
  at::NoGradGuard no_grad;
  torch::jit::Module model = load_model(opt.model, opt.device);

  std::optional<torch::jit::Module> other;
  std::string other_label;
  std::optional<hypatia::FusionReport> report;
  if (opt.fuse) {
    torch::jit::Module fused = model.clone();
    report = hypatia::fuse(fused, hypatia::FuseOptions{opt.freeze, opt.mlp});
    other = fused;
    other_label = opt.freeze ? "fused (hypatia::fuse, frozen)" : "fused (hypatia::fuse)";
  } else if (opt.compare) {
    other = load_model(*opt.compare, opt.device);
    other_label = "compare (" + *opt.compare + ")";
    if (opt.freeze) other = torch::jit::freeze(*other);
  }
  if (opt.freeze) model = torch::jit::freeze(model);

  const auto features = opt.features ? opt.features : infer_features(model);
  if (!features) {
    throw std::runtime_error("cannot infer the input features of '" + opt.model + "'; pass --features N");
  }
  // Drawn on the CPU, so that a seed gives the same input on every device.
  const at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(opt.seed));
  const at::Tensor input = at::randn({opt.batch, *features}, gen).to(opt.device);

  std::printf("model: %s\n", opt.model.c_str());
  std::printf("device: %s  threads: %d  batch: %lld  features: %lld  warmup: %lld  iters: %lld\n",
              opt.device.str().c_str(), at::get_num_threads(), static_cast<long long>(opt.batch),
              static_cast<long long>(*features), static_cast<long long>(opt.warmup),
              static_cast<long long>(opt.iters));
  const std::vector<Run> runs =
      other ? time_forwards({&model, &*other}, input, opt) : time_forwards({&model}, input, opt);
  const Run& base = runs.front();
  print_run(opt.freeze ? "original (frozen)" : "original", base, hypatia_nodes(model));
  if (!other) return 0;

  const Run& cand = runs.back();
  print_run(other_label, cand, hypatia_nodes(*other));
  if (report) {
    std::printf("fusion report: linear_relu=%d mlp=%d mlp_layers=%d skipped=%zu\n", report->linear_relu,
                report->mlp, report->mlp_layers, report->skipped.size());
    for (const auto& reason : report->skipped) std::printf("  skipped: %s\n", reason.c_str());
  }
  TORCH_CHECK(cand.output.sizes() == base.output.sizes(), "hypatia-run: output shapes differ: ",
              base.output.sizes(), " vs ", cand.output.sizes());
  const at::Tensor ref = base.output.to(at::kDouble);
  const at::Tensor diff = cand.output.to(at::kDouble) - ref;
  const double ref_norm = ref.norm().item<double>();
  std::printf("speed ratio (original/%s): %.3f\n", opt.fuse ? "fused" : "compare", base.median_ms / cand.median_ms);
  std::printf("max abs diff: %.3e\n", diff.abs().max().item<double>());
  std::printf("rel error: %.3e\n", ref_norm > 0 ? diff.norm().item<double>() / ref_norm : diff.norm().item<double>());
  return 0;
}

// One line of a (possibly multi-line) message: its first, or for a TorchScript traceback the
// last, which holds the error itself.
std::string one_line(const std::string& text) {
  std::istringstream stream(text);
  std::vector<std::string> lines;
  for (std::string line; std::getline(stream, line);) {
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  }
  if (lines.empty()) return text;
  const bool traceback = lines.front().find("TorchScript interpreter") != std::string::npos;
  return traceback ? lines.back() : lines.front();
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "hypatia-run: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    return run_main(opt);
  } catch (const c10::Error& e) {
    std::cerr << "hypatia-run: error: " << one_line(e.what_without_backtrace()) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "hypatia-run: error: " << one_line(e.what()) << "\n";
  }
  return 1;
}
