#include "process/stack_capture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "process/spawn.hpp"

namespace ddprun {

namespace fs = std::filesystem;

std::string find_debugger() {
  const char* path = std::getenv("PATH");
  for (const auto& dir : split(path ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    const auto candidate = fs::path(dir) / "gdb";
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

namespace {

// A Python worker is an interpreter whose executable is named python*, however it was started.
bool is_python(int pid) {
  std::error_code ec;
  const auto exe = fs::read_symlink(fmt::format("/proc/{}/exe", pid), ec);
  return !ec && exe.filename().string().rfind("python", 0) == 0;
}

struct Running {
  StackCapture result;
  pid_t pid = -1;  // the debugger
  int pidfd = -1;
  Clock::time_point started;
};

}  // namespace

std::vector<std::string> debugger_command(const std::string& gdb, int pid, bool python) {
  // Every shared library's symbols are read: without libtorch's unwind tables gdb cannot walk
  // from a blocked C++ frame back up to the interpreter's frames that py-bt prints.
  std::vector<std::string> argv = {gdb,  "-batch", "-nx", "-q", "-iex", "set pagination off",
                                   "-iex", "set print thread-events off", "-p",
                                   std::to_string(pid)};
  if (python) argv.insert(argv.end(), {"-ex", "echo \\n--- python ---\\n", "-ex", "py-bt"});
  argv.insert(argv.end(), {"-ex", "echo \\n--- native ---\\n", "-ex", "thread apply all bt"});
  return argv;
}

std::vector<StackCapture> capture_stacks(const std::vector<StackTarget>& targets,
                                         Deadline deadline) {
  std::vector<Running> running(targets.size());
  const auto gdb = find_debugger();
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto& r = running[i];
    r.result.pid = targets[i].pid;
    r.result.file = targets[i].file;
    r.started = Clock::now();
    if (gdb.empty()) {
      r.result.error = "no debugger: gdb is not on PATH (Debian: apt-get install gdb python3.11-dbg)";
      continue;
    }
    r.result.python = is_python(targets[i].pid);
    const int out = ::open(targets[i].file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
      r.result.error = fmt::format("cannot write {}: {}", targets[i].file, errno_message(errno));
      continue;
    }
    SpawnRequest request;
    request.path = gdb;
    request.argv = debugger_command(gdb, targets[i].pid, r.result.python);
    request.stdout_fd = out;
    request.stderr_fd = out;
    try {
      r.pid = spawn_process(request);
      r.pidfd = static_cast<int>(syscall(SYS_pidfd_open, r.pid, 0));
    } catch (const Error& e) {
      r.result.error = e.what();
    }
    ::close(out);
  }

  // Wait for every debugger on its pidfd, all within the one deadline.
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Running*> waiting;
    for (auto& r : running) {
      if (r.pid > 0) {
        fds.push_back(pollfd{r.pidfd, POLLIN, 0});
        waiting.push_back(&r);
      }
    }
    if (waiting.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining());
    const int n = left.count() > 0 ? ::poll(fds.data(), fds.size(), static_cast<int>(left.count()))
                                   : 0;
    if (n < 0 && errno == EINTR) continue;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      auto& r = *waiting[i];
      const bool done = n > 0 && (fds[i].revents & (POLLIN | POLLHUP)) != 0;
      if (!done && n > 0) continue;
      if (!done) ::kill(-r.pid, SIGKILL);  // the deadline passed: its whole group
      int status = 0;
      while (::waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
      }
      ::close(r.pidfd);
      r.pid = -1;
      r.result.seconds = std::chrono::duration<double>(Clock::now() - r.started).count();
      if (!done) {
        r.result.error = fmt::format("the debugger did not finish within the capture's deadline "
                                     "({:.1f}s)", r.result.seconds);
      } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        r.result.ok = true;
      } else {
        r.result.error = fmt::format("the debugger failed ({}); see {}",
                                     WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                                       : fmt::format("signal {}", WTERMSIG(status)),
                                     r.result.file);
      }
    }
  }
  std::vector<StackCapture> out;
  for (auto& r : running) out.push_back(std::move(r.result));
  return out;
}

}  // namespace ddprun
