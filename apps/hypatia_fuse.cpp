// hypatia-fuse [--freeze] [--no-mlp] [--report FILE] IN.pt OUT.pt
// Loads a TorchScript module (every tensor checked against its storage, io/model_file.h), fuses
// Linear+ReLU and Linear/ReLU chains into hypatia ops and saves it atomically. Failures print one
// printable line to stderr and exit non-zero (2: the command line, 1: the rest); IN.pt is only
// read, and OUT.pt and the report are either written whole or left as they were.
#include "io/model_file.h"
#include "io/text.h"
#include <hypatia/fuse.h>

#include <c10/util/Exception.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage = "usage: hypatia-fuse [--freeze] [--no-mlp] [--report FILE] IN.pt OUT.pt";

int fail(int code, const std::string& message, bool usage = false) {
  std::cerr << "hypatia-fuse: error: " << hypatia::error_line(message) << (usage ? std::string("; ") + kUsage : "")
            << "\n";
  return code;
}

// The message of whatever `f` throws, or "" when it returns.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  hypatia::FuseOptions options;
  std::string report_path;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--freeze") {
      options.freeze = true;
    } else if (arg == "--no-mlp") {
      options.mlp = false;
    } else if (arg == "--report") {
      if (i + 1 >= argc) return fail(2, "--report expects a file", true);
      report_path = argv[++i];
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage << "\n";
      return 0;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return fail(2, "unknown option " + hypatia::printable(arg), true);
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.size() != 2) return fail(2, "expected IN.pt and OUT.pt", true);
  const std::string& in = paths[0];
  const std::string& out = paths[1];
  std::string error = error_of([&] {
    hypatia::check_output_path(out, in);
    if (!report_path.empty()) hypatia::check_output_path(report_path, in, out);
  });
  if (!error.empty()) return fail(2, error);

  torch::jit::Module module;
  hypatia::FusionReport report;
  error = error_of([&] { module = hypatia::load_module(in); });
  if (!error.empty()) return fail(1, error);
  error = error_of([&] { report = hypatia::fuse(module, options); });
  if (!error.empty()) return fail(1, "cannot fuse " + hypatia::printable(in) + ": " + error);
  error = error_of([&] { hypatia::save_module(module, out, in); });
  if (!error.empty()) return fail(1, error);
  if (!report_path.empty()) {
    error = error_of([&] { hypatia::write_file(report_path, report.to_json() + "\n", in, out); });
    if (!error.empty()) {
      std::remove(out.c_str());  // just written: no output without its report
      return fail(1, error + " (" + hypatia::printable(out) + " removed)");
    }
  }
  std::cout << report.to_string() << "\n";
  return 0;
}
