#pragma once
// One captured output stream of one worker: reads the pipe on the runner's thread; the log file
// gets the bytes exactly as the worker wrote them, the console whole lines (with their prefix,
// in one write; a very long line in pieces; a progress bar's redraws as lines, at most two a
// second), and the last lines are kept for failure reports.

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/readable_pipe.hpp>

#include "process/line_splitter.hpp"

namespace ddprun {

class ConsoleFold;
class ConsoleWriter;
enum class FoldMode : std::uint8_t;

// torchrun's --duplicate-stdout-filters: the console lines holding any of the needles, with
// their prefix, copied to one file the ranks of an attempt share. Written on the runner's thread
// only.
class FilteredCopy {
 public:
  // Creates (or empties) the file; one that cannot be opened is reported as lost output.
  FilteredCopy(std::string path, std::vector<std::string> needles);
  ~FilteredCopy();
  FilteredCopy(const FilteredCopy&) = delete;
  FilteredCopy& operator=(const FilteredCopy&) = delete;

  void line(std::string_view prefix, std::string_view text);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> needles_;
  int fd_ = -1;
};

struct OutputTarget {
  int console_fd = -1;    // -1: not shown on the console
  std::string file;       // empty: no file
  std::string prefix;     // console prefix; "{time}" replaced per line
  std::size_t keep_tail = 0;
  std::function<void()> on_output;  // called per chunk read (OutputSpec::on_output)
  std::function<void(std::string_view)> on_line;  // OutputSpec::on_line
  ConsoleFold* fold = nullptr;  // not owned; null: every console line prints
  // Not owned; null: console lines are written on the reading thread, however long it takes.
  ConsoleWriter* console = nullptr;
  FoldMode fold_mode{};
  int rank = 0;  // whose lines these are, for folding
  std::string tag_host;  // OutputSpec::tag_host
  std::shared_ptr<FilteredCopy> copy;  // OutputSpec::stdout_copy/stderr_copy
};

class WorkerOutput {
 public:
  WorkerOutput(boost::asio::readable_pipe pipe, OutputTarget target);
  // Closes the pipe; a pending read completes without calling back.
  ~WorkerOutput();

  // Starts reading; `on_closed` runs once, at end of file or read error.
  void start(std::function<void()> on_closed);
  // From now on reads to the end (up to a megabyte) without waiting for the console to have
  // room: the worker exited, and what is left in the pipe (a traceback) belongs to its report.
  void drain();
  std::vector<std::string> tail() const;
  // The number of the last batch it gave the console writer (ConsoleWriter::write); 0: none.
  std::uint64_t last_console_batch() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Writes all of `data` to `fd`, retrying short writes; gives up silently when the fd is gone
// (a closed console must not hold up the writer).
void write_all(int fd, std::string_view data);
// The same for a line that may be skipped, as a sign of life may: false, and nothing written,
// when another writer of this process holds `fd` or it cannot take more now. Meant for short
// lines (up to PIPE_BUF, which a pipe takes whole or not at all) on a non-blocking descriptor:
// a blocking one may still block when another process fills it between the check and the
// write. With `socket`, `fd` is a socket and each send is non-blocking by itself.
bool try_write_all(int fd, std::string_view data, bool socket = false);

// Log files that could not be written in full (a full disk, an I/O error): one line each,
// "PATH: error", in the order the failures happened. Each file is reported once, as a warning,
// when it fails; the job's summary names them again (output was lost).
std::vector<std::string> lost_output_files();

// The last step of a worker's prefix, for each batch of lines: "{time}" becomes the local time
// (HH:MM:SS.mmm), and "{{" and "}}", kept until now, single braces.
std::string render_time_prefix(const std::string& prefix);

}  // namespace ddprun
