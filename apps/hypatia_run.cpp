// hypatia-run: loads a TorchScript model or an AOTInductor package, runs it on random inputs (or
// inputs saved from Python) and reports its latency; with --fuse (or --compare FILE) it also runs
// a second model on the same inputs and compares the two: latency medians, speed ratio, hypatia
// node counts and the difference of every output. --parallel N also runs N threads calling each
// model at once.
//
// Linked with -Wl,--no-as-needed against libhypatia_ops.so: the hypatia:: ops register
// themselves from static initialisers, which must run before a model that calls them is loaded.
#include "apps/run_inputs.h"
#include "apps/run_model.h"
#include "apps/run_outputs.h"
#include "io/model_file.h"
#include "io/text.h"
#include <hypatia/fuse.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using hypatia::printable;
using hypatia::run::Inputs;
using hypatia::run::InputSpec;
using hypatia::run::Model;
using hypatia::run::NodeCounts;
using hypatia::run::UsageError;

constexpr const char* kUsage =
    "usage: hypatia-run MODEL.pt|MODEL.pt2 [--fuse] [--freeze] [--no-mlp] [--compare OTHER.pt|OTHER.pt2]\n"
    "                   [--input SHAPE[:DTYPE[:LOW..HIGH]] ... | --inputs FILE] [--dtype bf16|fp16|fp32|fp64]\n"
    "                   [--device cpu|cuda|cuda:N] [--batch N] [--features N] [--iters N] [--warmup N]\n"
    "                   [--threads N] [--parallel N] [--seed N] [--json]\n"
    "  Runs a TorchScript model or an AOTInductor package (.pt2) on random inputs and prints its\n"
    "  median latency (docs/cpp_app.md).\n"
    "  --input SPEC    one per forward argument, e.g. 8x3x224x224 or 8x128:int64:0..30000 (values in\n"
    "                  [0, 30000)); default dtype float32 (N(0, 1)); without --input or --inputs, a\n"
    "                  float32 [batch, features] input for models whose first layer gives features\n"
    "  --inputs FILE   the inputs torch.save wrote: a tensor, a tuple/list, or a dict by argument name\n"
    "  --dtype D       cast the model's floating-point tensors and the floating inputs to D\n"
    "  --fuse          also run a copy rewritten by hypatia::fuse and compare it with MODEL.pt\n"
    "  --freeze        freeze first (torch::jit::freeze); with --fuse both sides are frozen\n"
    "  --no-mlp        with --fuse: only fused_linear_relu, no fused_mlp chains\n"
    "  --compare F     also run the model in file F (e.g. written by hypatia-fuse) and compare;\n"
    "                  the two are timed in 5 rounds that take turns, --iters calls each in all\n"
    "  --batch N       rows of the default input (default 64)\n"
    "  --features N    width of the default input (default: inferred from the model's first layer)\n"
    "  --threads N     intra-op CPU threads (at::set_num_threads and OMP_NUM_THREADS)\n"
    "  --parallel N    also run N threads calling each model at once (--iters calls each; on CUDA a\n"
    "                  stream per thread): throughput, p50/p99 latency, difference from the serial run\n"
    "  --json          print the results as one JSON object\n";

struct Options {
  std::string model;
  std::optional<std::string> compare;
  bool fuse = false;
  bool freeze = false;
  bool mlp = true;
  c10::Device device = c10::kCPU;
  std::optional<int64_t> batch;
  std::optional<int64_t> features;
  std::vector<std::string> input_texts;
  std::vector<InputSpec> inputs;
  std::optional<std::string> inputs_file;
  std::optional<at::ScalarType> dtype;
  int64_t iters = 20;
  int64_t warmup = 3;  // the profiling graph executor optimises after its first runs
  std::optional<int64_t> threads;
  int64_t parallel = 0;
  int64_t seed = 0;
  bool json = false;
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
    throw UsageError(flag + " expects an integer >= " + std::to_string(min) + ", got '" + printable(text) + "'");
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
    throw UsageError("--device expects cpu, cuda or cuda:N, got '" + printable(text) + "'");
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
    } else if (arg == "--input") {
      opt.input_texts.push_back(value());
      opt.inputs.push_back(hypatia::run::parse_input_spec(opt.input_texts.back()));
    } else if (arg == "--inputs") {
      opt.inputs_file = value();
    } else if (arg == "--dtype") {
      const std::string name = value();
      opt.dtype = hypatia::run::parse_dtype(name);
      if (!opt.dtype || !at::isFloatingType(*opt.dtype)) {
        throw UsageError("--dtype expects bf16, fp16, fp32 or fp64, got '" + printable(name) + "'");
      }
    } else if (arg == "--iters") {
      opt.iters = parse_count(arg, value(), 1);
    } else if (arg == "--warmup") {
      opt.warmup = parse_count(arg, value(), 0);
    } else if (arg == "--threads") {
      opt.threads = parse_count(arg, value(), 1);
    } else if (arg == "--parallel") {
      opt.parallel = parse_count(arg, value(), 1);
    } else if (arg == "--seed") {
      opt.seed = parse_count(arg, value(), 0);
    } else if (arg == "--json") {
      opt.json = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UsageError("unknown option '" + printable(arg) + "'");
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 1) {
    throw UsageError("expected one model file, got " + std::to_string(positional.size()));
  }
  if (opt.fuse && opt.compare) throw UsageError("--fuse and --compare exclude each other");
  if (!opt.mlp && !opt.fuse) throw UsageError("--no-mlp only applies with --fuse");
  if (!opt.inputs.empty() && opt.inputs_file) throw UsageError("--input and --inputs exclude each other");
  if ((opt.batch || opt.features) && (!opt.inputs.empty() || opt.inputs_file)) {
    throw UsageError("--batch and --features shape the default input; with --input or --inputs they do not apply");
  }
  opt.model = positional[0];
  return opt;
}

// Percentile p (0-100) of sorted values, nearest rank.
double percentile(const std::vector<double>& sorted, double p) {
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

struct ParallelRun {
  int64_t threads = 0;
  int64_t calls = 0;
  double wall_s = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_abs_diff = 0;  // of every thread's last output against the serial run's
};

struct Run {
  double median_ms = 0;
  double min_ms = 0;
  c10::IValue output;
  std::optional<ParallelRun> parallel;
};

// Appends the ms of `calls` timed forwards to `ms`. CUDA is timed with events on the current
// stream, so the figure is the device time of a forward, launches included.
void time_calls(const Model& model, const Inputs& inputs, const Options& opt, int64_t calls, Run& run,
                std::vector<double>& ms) {
  if (opt.device.is_cuda()) {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::kCUDA);
    const c10::Stream stream = impl->getStream(opt.device);
    torch::cuda::synchronize();
    for (int64_t i = 0; i < calls; ++i) {
      c10::Event start(c10::kCUDA, c10::EventFlag::BACKEND_DEFAULT);
      c10::Event stop(c10::kCUDA, c10::EventFlag::BACKEND_DEFAULT);
      start.record(stream);
      run.output = model.forward(inputs);
      stop.record(stream);
      stop.synchronize();
      ms.push_back(start.elapsedTime(stop));
    }
  } else {
    for (int64_t i = 0; i < calls; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run.output = model.forward(inputs);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
}

// Median and min of `iters` timed forwards of each model after the untimed ones, timed in
// kRounds rounds that take turns (the first model's calls, the second's, the first's again...),
// so that a slow spell of a shared machine falls on both alike.
constexpr int64_t kRounds = 5;

void time_forwards(const std::vector<const Model*>& models, const Inputs& inputs, const Options& opt,
                   std::vector<Run>& runs) {
  std::vector<std::vector<double>> ms(models.size());
  for (int64_t round = 0; round < kRounds; ++round) {
    const int64_t calls = opt.iters * (round + 1) / kRounds - opt.iters * round / kRounds;  // opt.iters in all
    for (size_t m = 0; m < models.size(); ++m) {
      time_calls(*models[m], inputs, opt, calls, runs[m], ms[m]);
    }
  }
  for (size_t m = 0; m < models.size(); ++m) {
    std::sort(ms[m].begin(), ms[m].end());
    const size_t n = ms[m].size();
    runs[m].median_ms = n % 2 ? ms[m][n / 2] : 0.5 * (ms[m][n / 2 - 1] + ms[m][n / 2]);
    runs[m].min_ms = ms[m].front();
  }
}

// The larger of two differences, NaN if either is.
double nan_max(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
}

// The largest `field` over the leaves.
double worst(const std::vector<hypatia::run::LeafDiff>& diffs, double hypatia::run::LeafDiff::*field) {
  double out = 0;
  for (const auto& d : diffs) out = nan_max(out, d.*field);
  return out;
}

double max_abs_diff(const c10::IValue& reference, const c10::IValue& candidate) {
  return worst(hypatia::run::compare_outputs(hypatia::run::flatten_output(reference), hypatia::run::flatten_output(candidate)),
               &hypatia::run::LeafDiff::max_abs);
}

// opt.parallel threads call `model` at once, each `opt.warmup` untimed and `opt.iters` timed
// times, with the intra-op thread count, grad mode and current device of the serial run; on CUDA
// each thread on a stream of its own, a call's latency lasting until its stream is done.
ParallelRun run_parallel(const Model& model, const Inputs& inputs, const Options& opt, const c10::IValue& serial) {
  const auto n = static_cast<size_t>(opt.parallel);
  std::vector<std::vector<double>> ms(n);
  std::vector<c10::IValue> outputs(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      try {
        at::init_num_threads();  // the count set on the main thread (at::set_num_threads is per thread in OpenMP)
        const c10::DeviceGuard device_guard(opt.device);
        at::NoGradGuard no_grad;
        std::optional<c10::Stream> stream;
        std::optional<c10::StreamGuard> stream_guard;
        if (opt.device.is_cuda()) {
          stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStreamFromGlobalPool(opt.device);
          stream_guard.emplace(*stream);
        }
        for (int64_t i = 0; i < opt.warmup; ++i) model.forward(inputs);
        if (stream) stream->synchronize();
        ++ready;
        while (!go.load()) std::this_thread::yield();
        for (int64_t i = 0; i < opt.iters; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          outputs[t] = model.forward(inputs);
          if (stream) stream->synchronize();
          ms[t].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
      } catch (...) {
        errors[t] = std::current_exception();
        ++ready;
      }
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  go = true;
  for (auto& thread : threads) thread.join();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  ParallelRun result;
  result.threads = opt.parallel;
  result.wall_s = wall_s;
  std::vector<double> all;
  for (size_t t = 0; t < n; ++t) {
    all.insert(all.end(), ms[t].begin(), ms[t].end());
    result.max_abs_diff = nan_max(result.max_abs_diff, max_abs_diff(serial, outputs[t]));
  }
  std::sort(all.begin(), all.end());
  result.calls = static_cast<int64_t>(all.size());
  result.p50_ms = percentile(all, 50);
  result.p99_ms = percentile(all, 99);
  return result;
}

// --- the report ---------------------------------------------------------------------------------

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[40];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

std::string json_ints(c10::IntArrayRef values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

struct InputInfo {
  std::string name;
  c10::IValue value;
  std::optional<InputSpec> spec;
};

std::string input_text(const InputInfo& input) {
  return input.spec ? hypatia::run::spec_text(*input.spec) : hypatia::run::describe(input.value);
}

std::string nodes_text(const NodeCounts& nodes) {
  return "fused_linear_relu=" + std::to_string(nodes.linear_relu) + " fused_mlp=" + std::to_string(nodes.mlp);
}

struct Report {
  std::vector<InputInfo> inputs;
  std::optional<int64_t> batch;
  std::optional<int64_t> features;
  std::vector<const Model*> models;
  std::vector<Run> runs;
  std::vector<NodeCounts> nodes;
  std::optional<hypatia::FusionReport> fusion;
  std::vector<hypatia::run::LeafDiff> diffs;
};

void print_text(const Options& opt, const Report& r) {
  std::printf("model: %s\n", printable(opt.model).c_str());
  std::string line = "device: " + opt.device.str() + "  threads: " + std::to_string(at::get_num_threads());
  if (opt.dtype) line += "  dtype: " + hypatia::run::dtype_name(*opt.dtype);
  if (r.features) line += "  batch: " + std::to_string(*r.batch) + "  features: " + std::to_string(*r.features);
  line += "  warmup: " + std::to_string(opt.warmup) + "  iters: " + std::to_string(opt.iters);
  std::printf("%s\n", line.c_str());
  line = "inputs:";
  for (const auto& input : r.inputs) line += " " + input.name + "=" + input_text(input);
  std::printf("%s\n", line.c_str());
  for (size_t m = 0; m < r.models.size(); ++m) {
    const Run& run = r.runs[m];
    std::printf("%s: median %.4f ms  min %.4f ms  hypatia nodes: %s\n", r.models[m]->label().c_str(), run.median_ms,
                run.min_ms, nodes_text(r.nodes[m]).c_str());
    if (run.parallel) {
      const ParallelRun& p = *run.parallel;
      std::printf("parallel %s: threads %lld  calls %lld  wall %.4f s  throughput %.1f calls/s  p50 %.4f ms  "
                  "p99 %.4f ms  max abs diff vs serial %.3e\n",
                  r.models[m]->label().c_str(), static_cast<long long>(p.threads), static_cast<long long>(p.calls),
                  p.wall_s, static_cast<double>(p.calls) / p.wall_s, p.p50_ms, p.p99_ms, p.max_abs_diff);
    }
  }
  if (r.fusion) {
    std::printf("fusion report: linear_relu=%d mlp=%d mlp_layers=%d skipped=%zu\n", r.fusion->linear_relu,
                r.fusion->mlp, r.fusion->mlp_layers, r.fusion->skipped.size());
    for (const auto& reason : r.fusion->skipped) std::printf("  skipped: %s\n", reason.c_str());
  }
  if (r.models.size() < 2) return;
  std::printf("speed ratio (original/%s): %.3f\n", opt.fuse ? "fused" : "compare",
              r.runs[0].median_ms / r.runs[1].median_ms);
  if (r.diffs.size() > 1) {
    for (const auto& d : r.diffs) {
      std::printf("output %s: %s  max abs diff %.3e  rel error %.3e\n", d.name.c_str(), d.what.c_str(), d.max_abs,
                  d.rel_error);
    }
  }
  std::printf("max abs diff: %.3e\n", worst(r.diffs, &hypatia::run::LeafDiff::max_abs));
  std::printf("rel error: %.3e\n", worst(r.diffs, &hypatia::run::LeafDiff::rel_error));
}

void print_json(const Options& opt, const Report& r) {
  using hypatia::json_string;
  std::string out = "{\"model\": " + json_string(printable(opt.model)) + ", \"device\": " + json_string(opt.device.str()) +
                    ", \"threads\": " + std::to_string(at::get_num_threads()) + ", \"dtype\": " +
                    (opt.dtype ? json_string(hypatia::run::dtype_name(*opt.dtype)) : "null") +
                    ", \"warmup\": " + std::to_string(opt.warmup) + ", \"iters\": " + std::to_string(opt.iters) +
                    ", \"seed\": " + std::to_string(opt.seed) + ", \"inputs\": [";
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const InputInfo& input = r.inputs[i];
    out += std::string(i ? ", " : "") + "{\"name\": " + json_string(input.name) + ", \"value\": " +
           json_string(input_text(input));
    if (input.value.isTensor()) {
      const at::Tensor& t = input.value.toTensor();
      out += ", \"shape\": " + json_ints(t.sizes()) + ", \"dtype\": " + json_string(hypatia::run::dtype_name(t.scalar_type()));
    }
    if (input.spec && at::isIntegralType(input.spec->dtype, false)) {
      out += ", \"low\": " + std::to_string(input.spec->low) + ", \"high\": " + std::to_string(input.spec->high);
    }
    out += "}";
  }
  out += "], \"runs\": [";
  for (size_t m = 0; m < r.models.size(); ++m) {
    const Run& run = r.runs[m];
    out += std::string(m ? ", " : "") + "{\"label\": " + json_string(printable(r.models[m]->label())) +
           ", \"path\": " + json_string(printable(r.models[m]->path())) + ", \"median_ms\": " + json_number(run.median_ms) +
           ", \"min_ms\": " + json_number(run.min_ms) + ", \"hypatia_nodes\": {\"fused_linear_relu\": " +
           std::to_string(r.nodes[m].linear_relu) + ", \"fused_mlp\": " + std::to_string(r.nodes[m].mlp) + "}";
    if (run.parallel) {
      const ParallelRun& p = *run.parallel;
      out += ", \"parallel\": {\"threads\": " + std::to_string(p.threads) + ", \"calls\": " + std::to_string(p.calls) +
             ", \"wall_s\": " + json_number(p.wall_s) +
             ", \"throughput_per_s\": " + json_number(static_cast<double>(p.calls) / p.wall_s) +
             ", \"p50_ms\": " + json_number(p.p50_ms) + ", \"p99_ms\": " + json_number(p.p99_ms) +
             ", \"max_abs_diff_vs_serial\": " + json_number(p.max_abs_diff) + "}";
    }
    out += "}";
  }
  out += "]";
  if (r.fusion) out += ", \"fusion_report\": " + r.fusion->to_json();
  if (r.models.size() > 1) {
    out += ", \"comparison\": {\"speed_ratio\": " + json_number(r.runs[0].median_ms / r.runs[1].median_ms) +
           ", \"max_abs_diff\": " + json_number(worst(r.diffs, &hypatia::run::LeafDiff::max_abs)) +
           ", \"rel_error\": " + json_number(worst(r.diffs, &hypatia::run::LeafDiff::rel_error)) + ", \"outputs\": [";
    for (size_t i = 0; i < r.diffs.size(); ++i) {
      const auto& d = r.diffs[i];
      out += std::string(i ? ", " : "") + "{\"name\": " + json_string(d.name) + ", \"value\": " + json_string(d.what) +
             ", \"max_abs_diff\": " + json_number(d.max_abs) + ", \"rel_error\": " + json_number(d.rel_error) + "}";
    }
    out += "]}";
  }
  std::printf("%s}\n", out.c_str());
}

// --- main ---------------------------------------------------------------------------------------

void check_device(const c10::Device& device) {
  if (!device.is_cuda()) return;
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    throw std::runtime_error("--device " + device.str() + " given, but no CUDA device is available");
  }
  if (device.index() >= count) {
    throw std::runtime_error(
        "--device " + device.str() + " given, but " +
        (count == 1 ? std::string("the one CUDA device is cuda:0")
                    : "the " + std::to_string(count) + " CUDA devices are cuda:0 to cuda:" + std::to_string(count - 1)));
  }
}

// The inputs of the run: --input specs, --inputs FILE or the default [batch, features] input,
// with the names of forward's arguments.
Inputs make_inputs(const Options& opt, const Model& model, Report& report) {
  const std::vector<std::string> names = model.input_names();
  auto name = [&](size_t i) { return i < names.size() ? names[i] : "in" + std::to_string(i); };
  Inputs inputs;
  if (opt.inputs_file) {
    inputs = hypatia::run::load_inputs(*opt.inputs_file, opt.device, opt.dtype);
  } else {
    std::vector<InputSpec> specs = opt.inputs;
    if (specs.empty()) {
      report.batch = opt.batch.value_or(64);
      report.features = opt.features ? opt.features : model.infer_features();
      if (!report.features || names.size() != 1) {
        throw UsageError("cannot infer the input of " + printable(model.path()) + " (" +
                         (model.is_package() ? "it takes " : "forward takes ") + model.signature() +
                         "); give --input SHAPE[:DTYPE[:LOW..HIGH]] for each");
      }
      specs.push_back(InputSpec{{*report.batch, *report.features}});
    }
    // Drawn on the CPU, so that a seed gives the same inputs on every device.
    at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(opt.seed));
    for (size_t i = 0; i < specs.size(); ++i) {
      inputs.args.push_back(hypatia::run::make_input(specs[i], gen, opt.device, opt.dtype));
      if (opt.dtype && at::isFloatingType(specs[i].dtype)) specs[i].dtype = *opt.dtype;  // as reported
      report.inputs.push_back({name(i), inputs.args.back(), specs[i]});
    }
    return inputs;
  }
  for (size_t i = 0; i < inputs.args.size(); ++i) report.inputs.push_back({name(i), inputs.args[i], std::nullopt});
  for (const std::string& n : names) {
    const auto it = inputs.kwargs.find(n);
    if (it != inputs.kwargs.end()) report.inputs.push_back({it->first, it->second, std::nullopt});
  }
  return inputs;
}

int run_main(const Options& opt) {
  if (opt.threads) {
    // OpenMP reads the variable when its pool starts; set_num_threads covers a started pool.
    setenv("OMP_NUM_THREADS", std::to_string(*opt.threads).c_str(), 1);
    at::set_num_threads(static_cast<int>(*opt.threads));
  }
  check_device(opt.device);
  // The chosen GPU is the current one from here on, as in an application serving from it.
  const c10::DeviceGuard device_guard(opt.device);
  at::NoGradGuard no_grad;

  const auto runners = static_cast<size_t>(std::max<int64_t>(opt.parallel, 1));
  const bool packages = hypatia::run::is_package_path(opt.model) || (opt.compare && hypatia::run::is_package_path(*opt.compare));
  if (packages && (opt.fuse || opt.freeze)) {
    throw UsageError("--fuse and --freeze rewrite TorchScript models; an AOTInductor package (.pt2) is compiled");
  }
  std::vector<Model> models;
  models.push_back(Model::load(opt.model, opt.freeze ? "original (frozen)" : "original", opt.device, opt.dtype, runners));
  Report report;
  if (opt.fuse) {
    Model fused(opt.model, opt.freeze ? "fused (hypatia::fuse, frozen)" : "fused (hypatia::fuse)", models[0].module().clone());
    report.fusion = hypatia::fuse(fused.module(), hypatia::FuseOptions{opt.freeze, opt.mlp});
    models.push_back(fused);
  } else if (opt.compare) {
    models.push_back(Model::load(*opt.compare, "compare (" + printable(*opt.compare) + ")", opt.device, opt.dtype, runners));
    if (opt.freeze) models[1].module() = torch::jit::freeze(models[1].module());
  }
  if (opt.freeze) models[0].module() = torch::jit::freeze(models[0].module());

  const Inputs inputs = make_inputs(opt, models[0], report);
  for (const Model& model : models) model.check_inputs(inputs);

  // One untimed call of each model first (the first of --warmup): a model that fails on these
  // inputs is a one-line error before anything is printed.
  for (const Model& model : models) {
    const std::string failed = printable(model.path()) + ": forward failed" +
                               (opt.dtype ? " with --dtype " + hypatia::run::dtype_name(*opt.dtype) : std::string()) + ": ";
    try {
      model.forward(inputs);
    } catch (const c10::Error& e) {
      throw std::runtime_error(failed + hypatia::error_line(e.what_without_backtrace()));
    } catch (const std::exception& e) {  // the interpreter's errors (torch::jit::JITException) among them
      throw std::runtime_error(failed + hypatia::error_line(e.what()));
    }
  }
  for (const Model& model : models) {
    for (int64_t i = 1; i < opt.warmup; ++i) model.forward(inputs);
  }
  for (const Model& model : models) {
    report.models.push_back(&model);
    report.nodes.push_back(model.hypatia_nodes());
  }
  report.runs.resize(models.size());
  time_forwards(report.models, inputs, opt, report.runs);
  if (opt.parallel > 0) {
    if (opt.device.is_cuda()) torch::cuda::synchronize();
    for (size_t m = 0; m < models.size(); ++m) {
      report.runs[m].parallel = run_parallel(models[m], inputs, opt, report.runs[m].output);
    }
  }
  if (models.size() > 1) {
    report.diffs = hypatia::run::compare_outputs(hypatia::run::flatten_output(report.runs[0].output),
                                                 hypatia::run::flatten_output(report.runs[1].output));
  }
  if (opt.json) {
    print_json(opt, report);
  } else {
    print_text(opt, report);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "hypatia-run: error: " << hypatia::error_line(e.what()) << " (see --help)\n";
    return 2;
  }
  try {
    return run_main(opt);
  } catch (const UsageError& e) {
    std::cerr << "hypatia-run: error: " << hypatia::error_line(e.what()) << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "hypatia-run: error: " << hypatia::error_line(e.what_without_backtrace()) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "hypatia-run: error: " << hypatia::error_line(e.what()) << "\n";
  }
  return 1;
}
