#include "agent/orphan_guard.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/random.hpp"

namespace ddprun {
namespace {

// Reads /proc/PID/environ; empty when the process is gone, a zombie, or not readable.
std::string read_environ(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/environ", std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool holds_variable(const std::string& environ, const std::string& entry) {
  for (std::size_t at = environ.find(entry); at != std::string::npos; at = environ.find(entry, at + 1)) {
    const bool starts = at == 0 || environ[at - 1] == '\0';
    const bool ends = at + entry.size() == environ.size() || environ[at + entry.size()] == '\0';
    if (starts && ends) return true;
  }
  return false;
}

// SIGKILLs every other process whose environment holds `marker` ("NAME=value"), scanning
// again until a scan finds none (one killed while forking leaves a marked child), at most
// `rounds` scans. Returns how many processes were killed.
int kill_marked(const std::string& marker, int rounds) {
  const std::string self = std::to_string(getpid());
  std::set<std::string> killed;
  for (int round = 0; round < rounds; ++round) {
    int found = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const auto pid = entry.path().filename().string();
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid == self) {
        continue;
      }
      if (holds_variable(read_environ(pid), marker) &&
          kill(static_cast<pid_t>(std::atol(pid.c_str())), SIGKILL) == 0) {
        ++found;
        killed.insert(pid);
      }
    }
    if (found == 0) break;
  }
  return static_cast<int>(killed.size());
}

[[noreturn]] void guardian_main(int fd, const std::string& marker) {
  prctl(PR_SET_NAME, "ddprun-guard", 0, 0, 0);
  // A Ctrl-C on the terminal reaches the whole foreground group: the guardian must outlive the
  // agent's own shutdown, so it ignores the usual stop signals (SIGKILL still works).
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) signal(s, SIG_IGN);
  std::vector<pid_t> groups;
  bool clean_end = false;
  std::string line;
  char buf[256];
  while (true) {
    auto n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        line.push_back(buf[i]);
        continue;
      }
      if (line == "=") clean_end = true;
      if (line.size() > 1) {
        auto pgid = static_cast<pid_t>(std::atol(line.c_str() + 1));
        if (line[0] == '+') groups.push_back(pgid);
        if (line[0] == '-') std::erase(groups, pgid);
      }
      line.clear();
    }
  }
  for (auto pgid : groups) kill(-pgid, SIGKILL);
  // The agent ended with no process left below it: nothing of the job is left anywhere.
  if (clean_end) _exit(0);
  // A killed process that is not yet reaped still shows its environment; later scans see it
  // again until it is a zombie, so a few rounds are normal.
  if (const int killed = kill_marked(marker, 50); killed > 0) {
    const std::string note = "ddprun-guard: the agent is gone; ended " + std::to_string(killed) +
                             " process(es) its workers had left running\n";
    (void)!write(STDERR_FILENO, note.data(), note.size());
  }
  _exit(0);
}

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t session = 0;
  std::string name;
};

// /proc/PID/stat: "pid (name) state ppid pgrp session ..."; the name may hold spaces and
// parentheses, so the fields are read after its last ')'.
bool read_process(pid_t pid, ProcessInfo& info) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const auto open = stat.find('(');
  const auto close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  char state = 0;
  int ppid = 0;
  int group = 0;
  int session = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %c %d %d %d", &state, &ppid, &group, &session) !=
      4) {
    return false;
  }
  info = {pid, ppid, session, stat.substr(open + 1, close - open - 1)};
  return true;
}

// This process's children. The kernel lists them in /proc/self/task/TID/children (one file per
// thread: a child belongs to the thread that forked it or adopted it); a kernel built without
// CONFIG_PROC_CHILDREN has no such files, and then every process's parent is read instead
// (/proc/*/stat: proportional to all processes on the machine, ~10 us each).
std::vector<ProcessInfo> own_children() {
  const pid_t self = getpid();
  std::vector<ProcessInfo> found;
  auto add = [&](pid_t pid) {
    ProcessInfo info;
    if (read_process(pid, info) && info.ppid == self) found.push_back(std::move(info));
  };
  std::error_code ec;
  bool listed = false;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "children");
    if (!in) break;
    listed = true;
    for (long pid = 0; in >> pid;) add(static_cast<pid_t>(pid));
  }
  if (listed) return found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    add(static_cast<pid_t>(std::atol(name.c_str())));
  }
  return found;
}

// This process's children in another session.
std::vector<ProcessInfo> adopted_daemons() {
  const pid_t own_session = getsid(0);
  auto found = own_children();
  std::erase_if(found, [&](const ProcessInfo& p) { return p.session == own_session; });
  return found;
}

// Reaps a killed child. SIGKILL ends a process promptly, but one stuck in the kernel (state D)
// is waited for `limit` only, so that the agent cannot hang here; the kernel then keeps it as
// this process's zombie until the agent exits.
void reap_within(pid_t pid, std::chrono::milliseconds limit) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, static_cast<int>(limit.count())) < 0 && errno == EINTR) {
    }
    close(fd);
  }
  waitpid(pid, nullptr, WNOHANG);
}

}  // namespace

int stop_adopted_daemons(int rounds) {
  std::vector<std::string> ended;
  for (int round = 0; round < rounds; ++round) {
    auto daemons = adopted_daemons();
    if (daemons.empty()) break;
    for (const auto& d : daemons) kill(d.pid, SIGKILL);
    for (const auto& d : daemons) {
      reap_within(d.pid, std::chrono::seconds(5));
      ended.push_back(fmt::format("{} ({})", d.pid, d.name));
    }
  }
  if (!ended.empty()) {
    spdlog::warn("ended {} process(es) that the workers left running in sessions of their own: "
                 "{}",
                 ended.size(), fmt::join(ended, ", "));
  }
  return static_cast<int>(ended.size());
}

OrphanGuard::OrphanGuard() {
  // Random, so that only this agent's descendants carry it (and nothing can guess it).
  marker_ = "DDPRUN_GUARD=" + random_hex(12);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw Error("orphan guard: pipe failed: " + errno_message(errno));
  }
  guardian_ = fork();
  if (guardian_ < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    throw Error("orphan guard: fork failed: " + errno_message(err));
  }
  if (guardian_ == 0) {
    close(fds[1]);
    guardian_main(fds[0], marker_);
  }
  close(fds[0]);
  fd_ = fds[1];
  // Orphaned descendants of the workers become this process's children (see the header).
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

OrphanGuard::~OrphanGuard() {
  // First the adopted daemons, named in a warning; the guardian then finds only what escaped
  // this process (reparented elsewhere) and still carries the marker.
  stop_adopted_daemons();
  if (fd_ >= 0) {
    // A subreaper's descendants stay below it while it lives: with no child left but the
    // guardian, none of the job's processes is left anywhere, and the guardian's sweep of every
    // process's environment (proportional to all processes on the machine) is skipped. A child
    // that exits while the list is read may hide another from that read, hence two reads.
    if (only_guardian_left() && only_guardian_left()) send_line("=");
    close(fd_);
  }
  if (guardian_ > 0) {
    // It exits as soon as it has swept; reap it so it does not linger as a zombie.
    int status = 0;
    waitpid(guardian_, &status, 0);
  }
}

void OrphanGuard::forget(pid_t pgid) { send_line('-' + std::to_string(pgid)); }

bool OrphanGuard::only_guardian_left() const {
  const auto children = own_children();
  return children.size() == 1 && children[0].pid == guardian_;
}

void OrphanGuard::send_line(const std::string& line) {
  const std::string msg = line + "\n";
  // Short writes to a pipe below PIPE_BUF are atomic; a failure means the guardian is gone,
  // which only weakens the guarantee, so it is not fatal.
  while (write(fd_, msg.data(), msg.size()) < 0 && errno == EINTR) {
  }
}

}  // namespace ddprun
