#pragma once
// Splits a byte stream into whole lines, so that a worker's line reaches the console in one
// piece however the pipe delivered it. A carriage return not followed by a newline (a progress
// bar redrawing itself, as tqdm does) also ends a piece: a redraw, which the next piece
// replaces. Pure; used by the process runner.

#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

struct SplitLine {
  std::string text;     // without its '\n', '\r' or "\r\n"
  bool redraw = false;  // ended by a lone '\r': a state the next piece supersedes

  bool operator==(const SplitLine&) const = default;
};

class LineSplitter {
 public:
  // A line longer than this is emitted in pieces of this size (a worker printing megabytes
  // without a newline must not grow the agent without bound).
  explicit LineSplitter(std::size_t max_line = 64 * 1024) : max_line_(max_line) {}

  // Appends bytes; returns the lines and redraws they completed. An empty redraw (the '\r' a
  // bar starts each update with) is not returned.
  std::vector<SplitLine> feed(std::string_view bytes);
  // At end of stream: the unterminated last line, if any.
  std::vector<SplitLine> finish();

 private:
  void end_piece(std::vector<SplitLine>& out, bool redraw);

  std::size_t max_line_;
  std::string pending_;
  // A '\r' was the last byte seen: the next byte says whether it ended a line ("\r\n") or a
  // redraw.
  bool after_cr_ = false;
};

}  // namespace ddprun
