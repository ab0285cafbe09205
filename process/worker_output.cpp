#include "process/worker_output.hpp"

#include <mutex>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <optional>
#include <cerrno>
#include <chrono>

#include <boost/asio.hpp>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "process/console_fold.hpp"
#include "process/console_writer.hpp"

namespace ddprun {

namespace asio = boost::asio;

std::string render_time_prefix(const std::string& prefix) {
  if (prefix.find_first_of("{}") == std::string::npos) return prefix;
  std::string stamp;
  std::string out;
  for (std::size_t i = 0; i < prefix.size();) {
    const char c = prefix[i];
    if ((c == '{' || c == '}') && i + 1 < prefix.size() && prefix[i + 1] == c) {
      out += c;
      i += 2;
    } else if (prefix.compare(i, 6, "{time}") == 0) {
      if (stamp.empty()) {
        const auto now = std::chrono::system_clock::now();
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
        stamp = fmt::format("{:%H:%M:%S}.{:03d}",
                            fmt::localtime(std::chrono::system_clock::to_time_t(now)), ms.count());
      }
      out += stamp;
      i += 6;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

namespace {
// One writer at a time in this process: a batch larger than the pipe's atomic size must not
// be interleaved with another thread's (a relay's and the workers' lines share stdout).
std::mutex write_mutex;
}  // namespace

bool try_write_all(int fd, std::string_view data, bool socket) {
  std::unique_lock lock(write_mutex, std::try_to_lock);
  if (!lock) return false;
  pollfd writable{fd, POLLOUT, 0};
  if (::poll(&writable, 1, 0) != 1 || (writable.revents & POLLOUT) == 0) return false;
  std::size_t done = 0;
  while (done < data.size()) {
    auto n = socket ? ::send(fd, data.data() + done, data.size() - done,
                             MSG_DONTWAIT | MSG_NOSIGNAL)
                    : ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void write_all(int fd, std::string_view data) {
  std::lock_guard lock(write_mutex);
  std::size_t done = 0;
  while (done < data.size()) {
    auto n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the console went away; the worker must not be held up by it
    done += static_cast<std::size_t>(n);
  }
}

namespace {

std::mutex lost_mutex;
std::vector<std::string> lost;

// The file's error, reported once: a warning now, and a line in the job's summary.
void report_lost_output(const std::string& path, int err) {
  const auto line = fmt::format("{}: {}", path, errno_message(err));
  spdlog::warn("worker output lost: cannot write {}; the rest of this stream is not saved",
               line);
  std::lock_guard lock(lost_mutex);
  lost.push_back(line);
}

// Writes all of `bytes` to a log file; false (with the error reported) when it cannot.
bool write_log(int fd, const std::string& path, std::string_view bytes) {
  while (!bytes.empty()) {
    const auto n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      report_lost_output(path, n < 0 ? errno : ENOSPC);
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

FilteredCopy::FilteredCopy(std::string path, std::vector<std::string> needles)
    : path_(std::move(path)), needles_(std::move(needles)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
               0644);
  if (fd_ < 0) report_lost_output(path_, errno);
}

FilteredCopy::~FilteredCopy() {
  if (fd_ >= 0) ::close(fd_);
}

void FilteredCopy::line(std::string_view prefix, std::string_view text) {
  if (fd_ < 0) return;
  const bool match = std::any_of(needles_.begin(), needles_.end(), [&](const std::string& n) {
    return text.find(n) != std::string_view::npos;
  });
  if (!match) return;
  std::string bytes;
  bytes.reserve(prefix.size() + text.size() + 1);
  bytes.append(prefix).append(text) += '\n';
  if (!write_log(fd_, path_, bytes)) {
    ::close(fd_);
    fd_ = -1;
  }
}

std::vector<std::string> lost_output_files() {
  std::lock_guard lock(lost_mutex);
  return lost;
}

// A progress bar redraws itself many times a second; the console shows it live, as a line per
// redraw, at most this often (the latest state wins; the log file keeps every byte).
constexpr auto kRedrawInterval = std::chrono::milliseconds(500);

struct WorkerOutput::State : std::enable_shared_from_this<WorkerOutput::State> {
  State(asio::readable_pipe p, OutputTarget t)
      : pipe(std::move(p)), target(std::move(t)), redraw_timer(pipe.get_executor()) {
    if (!target.file.empty()) {
      // Never through a link: the log directory is the job's own (launcher/log_dir.cpp), so a
      // link there was put by someone else.
      file = ::open(target.file.c_str(),
                    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (file < 0) report_lost_output(target.file, errno);
    }
  }
  ~State() {
    if (file >= 0) ::close(file);
  }

  // The file is a faithful copy: every byte as read, no newline added, however long a line.
  void write_file(std::string_view bytes) {
    if (file >= 0 && !write_log(file, target.file, bytes)) {
      ::close(file);
      file = -1;
    }
  }

  void read() {
    pipe.async_read_some(asio::buffer(chunk),
                         [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                           self->on_read(ec, n);
                         });
  }

  void on_read(boost::system::error_code ec, std::size_t n) {
    if (detached) return;
    if (!ec) {
      // What a grandchild holding the pipe writes after the worker's end waits for the
      // console again.
      if (draining) draining = (drain_budget -= std::min(drain_budget, n)) > 0;
      if (target.on_output) target.on_output();
      write_file(std::string_view(chunk.data(), n));
      emit(splitter.feed(std::string_view(chunk.data(), n)));
      // A console that does not keep up holds the worker in its own write, not the runner;
      // an exited worker's last lines (its traceback) are read at once (drain).
      if (!draining && target.console_fd >= 0 && target.console != nullptr &&
          target.console->backlogged()) {
        paused = true;
        target.console->when_room([self = shared_from_this()] { self->resume(); });
      } else {
        read();
      }
      return;
    }
    emit(splitter.finish());
    show_pending_redraw();
    if (on_closed) {
      auto done = std::move(on_closed);
      on_closed = nullptr;
      done();
    }
  }

  void emit(const std::vector<SplitLine>& pieces) {
    if (pieces.empty()) return;
    std::vector<const std::string*> shown;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& piece : pieces) {
      if (!piece.redraw) {
        pending_redraw.reset();  // a line supersedes the bar state before it
        shown.push_back(&piece.text);
      } else if (now - last_redraw >= kRedrawInterval) {
        pending_redraw.reset();
        last_redraw = now;
        shown.push_back(&piece.text);
      } else {
        pending_redraw = piece.text;
      }
    }
    // The latest redraw held back: shown when its interval is up, unless a newer piece takes
    // its place first.
    if (pending_redraw && !redraw_timer_armed) {
      redraw_timer_armed = true;
      redraw_timer.expires_at(last_redraw + kRedrawInterval);
      redraw_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        self->redraw_timer_armed = false;
        if (!ec && !self->detached) self->show_pending_redraw();
      });
    }
    write_console(shown);
    if (target.on_line) target.on_line(pieces.back().text);
    for (const auto& piece : pieces) {
      if (target.keep_tail == 0) break;
      if (piece.redraw) continue;  // a failure report wants what was printed, not bar states
      tail.push_back(piece.text);
      if (tail.size() > target.keep_tail) tail.pop_front();
    }
  }

  void resume() {
    if (detached || !paused) return;
    paused = false;
    read();
  }

  void show_pending_redraw() {
    if (!pending_redraw) return;
    const std::string text = std::move(*pending_redraw);
    pending_redraw.reset();
    last_redraw = std::chrono::steady_clock::now();
    write_console({&text});
  }

  // One write per batch of whole lines: lines from different workers never interleave.
  void write_console(const std::vector<const std::string*>& lines) {
    if (target.console_fd < 0 || lines.empty()) return;
    std::string batch;
    const auto prefix = render_time_prefix(target.prefix);
    for (const auto* line : lines) {
      if (target.copy) target.copy->line(prefix, *line);
      if (!target.tag_host.empty()) {
        batch += tag_console_line(target.rank, target.tag_host, prefix, *line);
        batch += '\n';
      } else if (target.fold != nullptr) {
        target.fold->add(target.console_fd, target.fold_mode, target.rank, {}, prefix, *line,
                         batch);
      } else {
        batch += prefix;
        batch += *line;
        batch += '\n';
      }
    }
    if (target.console != nullptr) {
      last_console_batch =
          std::max(last_console_batch, target.console->write(target.console_fd, std::move(batch)));
    } else {
      write_all(target.console_fd, batch);
    }
  }

  asio::readable_pipe pipe;
  OutputTarget target;
  LineSplitter splitter;
  std::array<char, 16 * 1024> chunk{};
  int file = -1;
  std::deque<std::string> tail;
  std::function<void()> on_closed;
  bool detached = false;
  asio::steady_timer redraw_timer;
  bool redraw_timer_armed = false;
  std::optional<std::string> pending_redraw;
  std::chrono::steady_clock::time_point last_redraw{};
  std::uint64_t last_console_batch = 0;
  bool paused = false;    // not reading until the console has room (ConsoleWriter::when_room)
  bool draining = false;  // the worker exited: read to the end whatever the console's backlog
  std::size_t drain_budget = 0;  // what draining reads at most
};

WorkerOutput::WorkerOutput(asio::readable_pipe pipe, OutputTarget target)
    : state_(std::make_shared<State>(std::move(pipe), std::move(target))) {}

WorkerOutput::~WorkerOutput() {
  state_->detached = true;
  state_->on_closed = nullptr;
  state_->redraw_timer.cancel();
  boost::system::error_code ignored;
  state_->pipe.close(ignored);
}

void WorkerOutput::start(std::function<void()> on_closed) {
  state_->on_closed = std::move(on_closed);
  state_->read();
}

void WorkerOutput::drain() {
  // A pipe's worth and more: what the worker left in it, not a flood from its grandchildren.
  state_->drain_budget = 1 << 20;
  state_->draining = true;
  state_->resume();
}

std::uint64_t WorkerOutput::last_console_batch() const { return state_->last_console_batch; }

std::vector<std::string> WorkerOutput::tail() const {
  return {state_->tail.begin(), state_->tail.end()};
}

}  // namespace ddprun
