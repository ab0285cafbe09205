#include "agent/orphan_guard.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace ddprun {
namespace {

[[noreturn]] void guardian_main(int fd) {
  prctl(PR_SET_NAME, "ddprun-guard", 0, 0, 0);
  // A Ctrl-C on the terminal reaches the whole foreground group: the guardian must outlive the
  // agent's own shutdown, so it ignores the usual stop signals (SIGKILL still works).
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) signal(s, SIG_IGN);
  std::vector<pid_t> groups;
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
      if (line.size() > 1) {
        auto pgid = static_cast<pid_t>(std::atol(line.c_str() + 1));
        if (line[0] == '+') groups.push_back(pgid);
        if (line[0] == '-') std::erase(groups, pgid);
      }
      line.clear();
    }
  }
  for (auto pgid : groups) kill(-pgid, SIGKILL);
  _exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
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
    guardian_main(fds[0]);
  }
  close(fds[0]);
  fd_ = fds[1];
}

OrphanGuard::~OrphanGuard() {
  if (fd_ >= 0) close(fd_);
  if (guardian_ > 0) {
    // It exits as soon as it sees the pipe close; reap it so it does not linger as a zombie.
    int status = 0;
    waitpid(guardian_, &status, 0);
  }
}

void OrphanGuard::watch(pid_t pgid) { send('+', pgid); }
void OrphanGuard::forget(pid_t pgid) { send('-', pgid); }

void OrphanGuard::send(char op, pid_t pgid) {
  std::string msg = op + std::to_string(pgid) + "\n";
  // Short writes to a pipe below PIPE_BUF are atomic; a failure means the guardian is gone,
  // which only weakens the guarantee, so it is not fatal.
  while (write(fd_, msg.data(), msg.size()) < 0 && errno == EINTR) {
  }
}

}  // namespace ddprun
