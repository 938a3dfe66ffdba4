// Error types of onnx-train: every failure a user can cause is one of these, carrying a
// sentence that says what went wrong, where (file, node, op, rank) and what to do.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace ot {

// Any error with a message meant for the user.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// The model or input uses something this build does not support (an op, an opset, a
// data type). Test runners treat it as "skipped", never as "passed".
class UnsupportedError : public Error {
 public:
  explicit UnsupportedError(const std::string& message) : Error(message) {}
};

// Formats like printf into a std::string.
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// The first `shown` names joined by ", ", and ", ..." when there are more: for messages.
std::string FirstNames(const std::vector<std::string>& names, size_t shown = 3);

}  // namespace ot

// Throws ot::Error (or the given type) with a formatted message when cond is false.
#define OT_CHECK(cond, ...)                                   \
  do {                                                        \
    if (!(cond)) throw ::ot::Error(::ot::StrFormat(__VA_ARGS__)); \
  } while (0)
