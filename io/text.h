#pragma once
// Text for users and tools: error messages made one printable line, JSON string literals.
#include <string>
#include <string_view>

namespace hypatia {

// `text` with every byte that is not printable ASCII escaped: newline and tab as \n and \t, the
// rest (control characters, and all bytes of non-ASCII text, which may not be valid UTF-8 or may
// hold line separators and bidi controls) as \xNN. Safe to print as one line whatever a file or
// an exception carried.
std::string printable(std::string_view text);

// One printable line of a possibly multi-line message: its first non-blank line, or for a
// TorchScript interpreter traceback its last, which holds the error itself.
std::string error_line(std::string_view message);

// `text` as a JSON string literal, quotes included.
std::string json_string(std::string_view text);

}  // namespace hypatia
