#include "process/worker_output.hpp"

#include <mutex>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>

#include <boost/asio.hpp>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

namespace asio = boost::asio;

std::string render_time_prefix(const std::string& prefix) {
  auto pos = prefix.find("{time}");
  if (pos == std::string::npos) return prefix;
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  auto stamp = fmt::format("{:%H:%M:%S}.{:03d}", fmt::localtime(std::chrono::system_clock::to_time_t(now)),
                           ms.count());
  std::string out = prefix;
  out.replace(pos, 6, stamp);
  return out;
}

void write_all(int fd, std::string_view data) {
  // One writer at a time in this process: a batch larger than the pipe's atomic size must not
  // be interleaved with another thread's (a relay's and the workers' lines share stdout).
  static std::mutex mutex;
  std::lock_guard lock(mutex);
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

}  // namespace

std::vector<std::string> lost_output_files() {
  std::lock_guard lock(lost_mutex);
  return lost;
}

struct WorkerOutput::State : std::enable_shared_from_this<WorkerOutput::State> {
  State(asio::readable_pipe p, OutputTarget t) : pipe(std::move(p)), target(std::move(t)) {
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
    while (file >= 0 && !bytes.empty()) {
      const auto n = ::write(file, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        report_lost_output(target.file, n < 0 ? errno : ENOSPC);
        ::close(file);
        file = -1;
        return;
      }
      bytes.remove_prefix(static_cast<std::size_t>(n));
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
      if (target.on_output) target.on_output();
      write_file(std::string_view(chunk.data(), n));
      emit(splitter.feed(std::string_view(chunk.data(), n)));
      read();
      return;
    }
    emit(splitter.finish());
    if (on_closed) {
      auto done = std::move(on_closed);
      on_closed = nullptr;
      done();
    }
  }

  void emit(const std::vector<std::string>& lines) {
    if (lines.empty()) return;
    if (target.console_fd >= 0) {
      // One write per batch of whole lines: lines from different workers never interleave.
      std::string batch;
      const auto prefix = render_time_prefix(target.prefix);
      for (const auto& line : lines) {
        batch += prefix;
        batch += line;
        batch += '\n';
      }
      write_all(target.console_fd, batch);
    }
    for (const auto& line : lines) {
      if (target.keep_tail == 0) break;
      tail.push_back(line);
      if (tail.size() > target.keep_tail) tail.pop_front();
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
};

WorkerOutput::WorkerOutput(asio::readable_pipe pipe, OutputTarget target)
    : state_(std::make_shared<State>(std::move(pipe), std::move(target))) {}

WorkerOutput::~WorkerOutput() {
  state_->detached = true;
  state_->on_closed = nullptr;
  boost::system::error_code ignored;
  state_->pipe.close(ignored);
}

void WorkerOutput::start(std::function<void()> on_closed) {
  state_->on_closed = std::move(on_closed);
  state_->read();
}

std::vector<std::string> WorkerOutput::tail() const {
  return {state_->tail.begin(), state_->tail.end()};
}

}  // namespace ddprun
