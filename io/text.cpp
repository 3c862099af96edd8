// printable, error_line and json_string (io/text.h). Strings are built by concatenation:
// std::ostringstream in this library crashed inside Python processes on the GPU machine (gcc 13),
// as streaming a SymInt had before (ops/checks.cpp).
#include "io/text.h"

#include <vector>

namespace hypatia {
namespace {

const char* const kHex = "0123456789abcdef";

// Length of the well-formed UTF-8 sequence of 2-4 bytes that starts at text[i], or 0.
size_t utf8_sequence(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // range of the second byte (RFC 3629's table)
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;
    if (lead == 0xed) high = 0x9f;  // no UTF-16 surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  }
  return length;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (const size_t length = c >= 0x80 ? utf8_sequence(text, i) : 0) {
      out.append(text.data() + i, length);
      i += length;
    } else {
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
      ++i;
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
