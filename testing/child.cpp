#include "testing/child.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include <fmt/format.h>

#include "common/error.hpp"

extern char** environ;

namespace ddprun::test {

double mono_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

Child::Child(const SpawnSpec& spec) : name_(spec.argv.empty() ? "?" : spec.argv.front()) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const auto name = entry.substr(0, eq);
    if (name == "PYTHON_EXEC" || name == "DDPRUN_TOKEN" || name.starts_with("PET_") ||
        name.starts_with("TORCHELASTIC_")) {
      continue;
    }
    env[name] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : spec.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string out = spec.output.empty() ? "/dev/null" : spec.output;
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (spec.errors.empty()) {
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, spec.errors.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  // Nothing else is inherited: in particular not the build lock that `flock ... bench.sh`
  // holds, which a child left behind would otherwise keep locked.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  int rc = posix_spawnp(&pid_, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw Error(fmt::format("cannot start {}: {}", name_, errno_message(rc)));
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd_ < 0) {
    int err = errno;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    throw Error(fmt::format("pidfd_open for {} failed: {}", name_, errno_message(err)));
  }
}

Child::~Child() {
  if (!status_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (pidfd_ >= 0) close(pidfd_);
}

std::optional<int> Child::wait_for(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  pollfd p{pidfd_, POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    int rc = poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (rc > 0) break;
    if (rc == 0) return std::nullopt;
    if (errno != EINTR) throw Error("poll on a pidfd failed: " + errno_message(errno));
  }
  exit_mono_ = mono_now();
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) throw Error("waitpid failed: " + errno_message(errno));
  }
  status_ = status;
  return status_;
}

int Child::wait(std::chrono::milliseconds timeout) {
  auto status = wait_for(timeout);
  if (!status) {
    throw TimeoutError(fmt::format("{} (pid {}) still runs after {} ms", name_, pid_,
                                   timeout.count()));
  }
  return *status;
}

void Child::signal(int sig) {
  if (!status_) kill(pid_, sig);
}

void Child::signal_group(int sig) {
  if (!status_) kill(-pid_, sig);
}

}  // namespace ddprun::test
