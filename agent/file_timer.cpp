#include "agent/file_timer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/failure_record.hpp"

namespace ddprun {

std::optional<TimerRequest> parse_timer_request(const std::string& line) {
  try {
    const auto j = nlohmann::json::parse(line);
    TimerRequest r;
    r.pid = j.at("pid").get<int>();
    r.scope = j.at("scope_id").get<std::string>();
    r.expiration = j.at("expiration_time").get<double>();
    r.signal = j.value("signal", 0);
    if (r.pid <= 0 || !std::isfinite(r.expiration)) return std::nullopt;
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

void TimerTable::apply(const TimerRequest& request) {
  const auto key = std::make_pair(request.pid, request.scope);
  if (request.expiration < 0) {
    timers_.erase(key);
  } else {
    timers_[key] = request;
  }
}

std::optional<double> TimerTable::next_expiry() const {
  std::optional<double> next;
  for (const auto& [key, t] : timers_) {
    if (!next || t.expiration < *next) next = t.expiration;
  }
  return next;
}

std::vector<TimerRequest> TimerTable::take_expired(double now) {
  std::vector<TimerRequest> expired;
  for (auto it = timers_.begin(); it != timers_.end();) {
    if (it->second.expiration <= now) {
      expired.push_back(it->second);
      it = timers_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(expired.begin(), expired.end(),
            [](const auto& a, const auto& b) { return a.expiration < b.expiration; });
  return expired;
}

bool TimerTable::has_pid(int pid) const {
  return std::any_of(timers_.begin(), timers_.end(),
                     [pid](const auto& entry) { return entry.first.first == pid; });
}

void TimerTable::forget_pid(int pid) {
  for (auto it = timers_.begin(); it != timers_.end();) {
    it = it->first.first == pid ? timers_.erase(it) : std::next(it);
  }
}

FileTimerServer::FileTimerServer(std::string path, EventQueue& events,
                                 std::function<void(int)> on_request)
    : path_(std::move(path)), events_(events), on_request_(std::move(on_request)) {
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode)) {
      throw ConfigError(fmt::format("TORCHELASTIC_TIMER_FILE={} exists and is not a FIFO; "
                                    "remove it or name another path", path_));
    }
    ::unlink(path_.c_str());  // a FIFO left by an earlier run, as torchrun replaces it
  }
  if (::mkfifo(path_.c_str(), 0600) != 0) {
    throw Error(fmt::format("cannot make the FileTimer FIFO {}: {}", path_, errno_message(errno)));
  }
  fifo_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  keep_open_ = fifo_ >= 0 ? ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC) : -1;
  wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fifo_ < 0 || keep_open_ < 0 || wake_ < 0) {
    const int err = errno;
    for (int fd : {fifo_, keep_open_, wake_}) {
      if (fd >= 0) ::close(fd);
    }
    ::unlink(path_.c_str());
    throw Error(fmt::format("cannot open the FileTimer FIFO {}: {}", path_, errno_message(err)));
  }
  thread_ = std::thread([this] { serve(); });
}

FileTimerServer::~FileTimerServer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_, &one, sizeof(one));
  thread_.join();
  for (int fd : {fifo_, keep_open_, wake_}) ::close(fd);
  ::unlink(path_.c_str());
}

void FileTimerServer::forget(const std::vector<int>& pids) {
  std::lock_guard lock(mutex_);
  for (int pid : pids) table_.forget_pid(pid);
}

bool FileTimerServer::pending(const std::vector<int>& pids) {
  std::lock_guard lock(mutex_);
  return std::any_of(pids.begin(), pids.end(), [&](int pid) { return table_.has_pid(pid); });
}

void FileTimerServer::handle_line(const std::string& line) {
  auto request = parse_timer_request(line);
  if (!request) {
    spdlog::warn("FileTimer {}: ignoring a request that is not one: {:.200}", path_, line);
    return;
  }
  if (on_request_) on_request_(request->pid);
  std::lock_guard lock(mutex_);
  table_.apply(*request);
}

// One thread: reads request lines as they come and wakes at the earliest expiry. Clients write
// whole lines of at most PIPE_BUF bytes, so a line never interleaves with another's.
void FileTimerServer::serve() {
  std::string pending;
  char buf[4096];
  while (true) {
    int timeout_ms = -1;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      if (auto next = table_.next_expiry()) {
        const double wait = std::max(0.0, *next - unix_seconds());
        timeout_ms = static_cast<int>(std::min(wait * 1000.0 + 1.0, 3'600'000.0));
      }
    }
    pollfd fds[2] = {{fifo_, POLLIN, 0}, {wake_, POLLIN, 0}};
    const int n = ::poll(fds, 2, timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("FileTimer {}: poll failed: {}; timers are no longer served", path_,
                    errno_message(errno));
      return;
    }
    if (n > 0 && (fds[0].revents & POLLIN) != 0) {
      ssize_t got = 0;
      // A bounded number of reads per wake-up: a client that never stops writing must not
      // keep expiries and the stop from being looked at.
      for (int reads = 0; reads < 64 && (got = ::read(fifo_, buf, sizeof(buf))) > 0; ++reads) {
        pending.append(buf, static_cast<std::size_t>(got));
        for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
          handle_line(pending.substr(0, nl));
          pending.erase(0, nl + 1);
        }
        if (pending.size() > 65536) pending.clear();  // not a client's line: drop it
      }
    }
    std::vector<TimerRequest> expired;
    {
      std::lock_guard lock(mutex_);
      expired = table_.take_expired(unix_seconds());
    }
    for (const auto& t : expired) {
      AgentEvent e;
      e.kind = AgentEvent::Kind::kTimerExpired;
      e.round = -1;
      e.pid = t.pid;
      e.text = t.scope;
      e.expired_at = t.expiration;
      e.timer_signal = t.signal;
      events_.push(std::move(e));
    }
  }
}

}  // namespace ddprun
