#include "cluster/head_link.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/error.hpp"
#include "process/worker_output.hpp"

namespace ddprun {

namespace {
// A hello carries the forwarded environment and the arguments (as many as a local start allows,
// up to twice their size in its text form) for this host and the hosts it relays.
constexpr std::size_t kMaxControlLine = 64 << 20;
}

HeadLink::HeadLink(int in_fd, int out_fd) : in_fd_(in_fd), out_fd_(out_fd) {
  if (pipe2(wake_, O_CLOEXEC) != 0) {
    throw Error(fmt::format("cannot create a pipe: {}", errno_message(errno)));
  }
}

HeadLink::~HeadLink() {
  stop();
  if (alive_fd_ >= 0) close(alive_fd_);
  close(wake_[0]);
  close(wake_[1]);
}

HeadLink::Got HeadLink::next_line(Deadline deadline, std::string* line) {
  for (;;) {
    if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
      *line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return Got::kLine;
    }
    if (buffer_.size() > kMaxControlLine) {
      throw Error(fmt::format("a line of more than {} bytes from the command", kMaxControlLine));
    }
    pollfd fds[2] = {{in_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining());
    int n = poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), 60'000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("waiting for the command: {}", errno_message(errno)));
    if (fds[1].revents != 0) return Got::kEnd;  // shutting down
    if (n == 0) {
      if (deadline.expired()) return Got::kTimeout;
      continue;
    }
    char chunk[4096];
    auto got = read(in_fd_, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Got::kEnd;
    buffer_.append(chunk, static_cast<std::size_t>(got));
  }
}

SessionHello HeadLink::read_hello(Deadline deadline) {
  std::string line;
  switch (next_line(deadline, &line)) {
    case Got::kLine:
      return decode_hello(line);
    case Got::kEnd:
      throw Error("the input ended before the session's hello (this form of ddprun is started "
                  "by ddprun --hosts, not by hand)");
    case Got::kTimeout:
      break;
  }
  throw Error("no session hello on stdin (this form of ddprun is started by ddprun --hosts, "
              "not by hand)");
}

void HeadLink::report(const Report& report, const std::string& token) {
  write_all(out_fd_, encode_report(token, report) + "\n");
}

bool HeadLink::wait_for_go(std::chrono::milliseconds silence, std::string* why) {
  std::string line;
  for (;;) {
    switch (next_line(Deadline::after(silence), &line)) {
      case Got::kLine:
        if (auto c = decode_control(line)) {
          if (forward_) forward_(line);
          if (c->kind == Control::Kind::kGo) return true;
        }
        continue;  // pings
      case Got::kEnd:
        *why = "the command ended the session before the start";
        return false;
      case Got::kTimeout:
        *why = fmt::format("heard nothing from the command for {}", format_duration(silence));
        return false;
    }
  }
}

void HeadLink::watch(std::chrono::milliseconds silence,
                     std::function<void(const std::string&)> on_lost, Report alive,
                     std::string token) {
  // A descriptor of its own, non-blocking, on the same pipe: the signs of life must never
  // wait for a reader, and O_NONBLOCK on out_fd_ itself would reach every other writer of it
  // (the workers under --raw-output).
  struct stat st {};
  if (fstat(out_fd_, &st) == 0) {
    if (S_ISFIFO(st.st_mode)) {
      alive_fd_ = ::open(fmt::format("/proc/self/fd/{}", out_fd_).c_str(),
                         O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    }
    out_is_socket_ = S_ISSOCK(st.st_mode);
  }
  watcher_ = std::thread([this, silence, on_lost = std::move(on_lost), alive = std::move(alive),
                          token = std::move(token)] { watch_loop(silence, on_lost, alive, token); });
}

bool HeadLink::woken(Clock::time_point until) {
  pollfd wake{wake_[0], POLLIN, 0};
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    const int n = poll(&wake, 1, static_cast<int>(std::clamp<long long>(left.count(), 0, 60'000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) {
      // Not expected of one pipe; the caller must not spin on it.
      std::this_thread::sleep_until(until);
      return false;
    }
    if (n == 0 && Clock::now() >= until) return false;
  }
}

void HeadLink::watch_loop(std::chrono::milliseconds silence,
                          const std::function<void(const std::string&)>& on_lost,
                          const Report& alive, const std::string& token) {
  const auto every = keep_alive_every(silence);
  const auto alive_line = encode_report(token, alive) + "\n";
  auto heard = Clock::now();
  auto next_alive = Clock::now();
  bool lost = false;
  const auto lose = [&](const std::string& why) {
    on_lost(why);
    ::kill(getpid(), SIGTERM);
    lost = true;
  };
  std::string line;
  for (;;) {
    if (Clock::now() >= next_alive) {
      // Skipped rather than waited for when stdout is busy or full: this thread must go on
      // reading the command's signals, and output the command has yet to read tells it as much.
      try_write_all(alive_fd_ >= 0 ? alive_fd_ : out_fd_, alive_line, out_is_socket_);
      next_alive = Clock::now() + every;
    }
    if (lost) {
      // The agent still stops its workers, for up to its shutdown timeout: it stays alive to
      // the command (or relay), which would otherwise end it and lose its result.
      if (woken(next_alive)) return;
      continue;
    }
    Got got;
    try {
      got = next_line(Deadline::at(std::min(heard + silence, next_alive)), &line);
    } catch (const Error& e) {
      lose(e.what());
      continue;
    }
    if (got == Got::kLine) {
      heard = Clock::now();
      auto control = decode_control(line);
      if (control && forward_) forward_(line);
      if (control && control->kind == Control::Kind::kSignal) ::kill(getpid(), control->signal);
      continue;
    }
    if (got == Got::kTimeout && Clock::now() < heard + silence) continue;  // time for "alive"
    // stop()'s wake-up also reads as the end: tell them apart by the wake pipe.
    if (woken(Clock::now())) return;
    lose(got == Got::kEnd ? std::string("the connection to the command closed")
                          : fmt::format("heard nothing from the command for {}",
                                        format_duration(silence)));
  }
}

void HeadLink::stop() {
  if (!watcher_.joinable()) return;
  (void)!write(wake_[1], "x", 1);
  watcher_.join();
}

}  // namespace ddprun
