// hypatia-fuse [--freeze] [--no-mlp] [--report FILE] IN.pt OUT.pt
// Loads a TorchScript module, fuses Linear+ReLU and Linear/ReLU chains into hypatia ops, saves it.
// Failures print one line to stderr, exit non-zero and leave no OUT.pt behind.
#include <hypatia/fuse.h>

#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/import.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage = "usage: hypatia-fuse [--freeze] [--no-mlp] [--report FILE] IN.pt OUT.pt";

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

int fail(const std::string& message) {
  std::cerr << "hypatia-fuse: error: " << first_line(message) << "\n";
  return 1;
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
    } else if (arg == "--report" && i + 1 < argc) {
      report_path = argv[++i];
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage << "\n";
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      std::cerr << "hypatia-fuse: error: unknown option " << arg << "; " << kUsage << "\n";
      return 2;
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.size() != 2) {
    std::cerr << "hypatia-fuse: error: expected IN.pt and OUT.pt; " << kUsage << "\n";
    return 2;
  }
  const std::string& in = paths[0];
  const std::string& out = paths[1];

  torch::jit::Module module;
  try {
    module = torch::jit::load(in);
  } catch (const c10::Error& e) {
    return fail("cannot load " + in + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail("cannot load " + in + ": " + e.what());
  }

  hypatia::FusionReport report;
  // Saved to a temporary name first: a failed save must not leave a partial OUT.pt.
  const std::string partial = out + ".partial";
  try {
    report = hypatia::fuse(module, options);
    module.save(partial);
  } catch (const c10::Error& e) {
    std::remove(partial.c_str());
    return fail("cannot fuse " + in + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::remove(partial.c_str());
    return fail("cannot fuse " + in + ": " + e.what());
  }
  if (!report_path.empty()) {
    std::ofstream file(report_path);
    file << report.to_json() << "\n";
    if (!file) {
      std::remove(partial.c_str());
      return fail("cannot write report " + report_path);
    }
  }
  if (std::rename(partial.c_str(), out.c_str()) != 0) {
    std::remove(partial.c_str());
    return fail("cannot write " + out);
  }
  std::cout << report.to_string() << "\n";
  return 0;
}
