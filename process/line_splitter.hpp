#pragma once
// Splits a byte stream into whole lines, so that a worker's line reaches the console in one
// piece however the pipe delivered it. Pure; used by the process runner.

#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

class LineSplitter {
 public:
  // A line longer than this is emitted in pieces of this size (a worker printing megabytes
  // without a newline must not grow the agent without bound).
  explicit LineSplitter(std::size_t max_line = 64 * 1024) : max_line_(max_line) {}

  // Appends bytes; returns the lines they completed, without their '\n'.
  std::vector<std::string> feed(std::string_view bytes);
  // At end of stream: the unterminated last line, if any.
  std::vector<std::string> finish();

 private:
  std::size_t max_line_;
  std::string pending_;
};

}  // namespace ddprun
