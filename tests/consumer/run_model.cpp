// run_model MODEL.pt ROWS FEATURES: loads the TorchScript file, runs it on a [ROWS, FEATURES] float32
// input of linspace(-1, 1) and prints the output's shape and sum in float64.
#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/import.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: run_model MODEL.pt ROWS FEATURES\n");
    return 2;
  }
  try {
    torch::jit::Module model = torch::jit::load(argv[1]);
    const int64_t rows = std::stoll(argv[2]), features = std::stoll(argv[3]);
    const at::Tensor input = at::linspace(-1, 1, rows * features).reshape({rows, features});
    const at::Tensor out = model.forward({input}).toTensor();
    std::printf("shape: %lld x %lld\nsum: %.17g\n", static_cast<long long>(out.size(0)),
                static_cast<long long>(out.size(1)), out.to(at::kDouble).sum().item<double>());
  } catch (const std::exception& error) {
    // The first line that says something (TorchScript's messages may start with a newline).
    std::string message = error.what();
    message.erase(0, message.find_first_not_of('\n'));
    std::fprintf(stderr, "run_model: error: %s\n", message.substr(0, message.find('\n')).c_str());
    return 1;
  }
  return 0;
}
