// printable, error_line and json_string (io/text.h). Strings are built by concatenation:
// std::ostringstream in this library crashed inside Python processes on the GPU machine (gcc 13),
// as streaming a SymInt had before (ops/checks.cpp).
#include "io/text.h"

#include <vector>

namespace hypatia {
namespace {

const char* const kHex = "0123456789abcdef";

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
    }
  }
  return out;
}

std::string error_line(std::string_view message) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= message.size();) {
    size_t end = message.find('\n', start);
    if (end == std::string_view::npos) end = message.size();
    const std::string_view line = message.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) lines.push_back(line);
    start = end + 1;
  }
  if (lines.empty()) return printable(message);
  const bool traceback = lines.front().find("TorchScript interpreter") != std::string_view::npos;
  std::string_view line = traceback ? lines.back() : lines.front();
  const size_t first = line.find_first_not_of(" \t");
  const size_t last = line.find_last_not_of(" \t\r");
  return printable(line.substr(first, last - first + 1));
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + '"';
}

}  // namespace hypatia
