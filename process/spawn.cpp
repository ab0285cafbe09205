#include "process/spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "process/child_setup.hpp"

namespace ddprun {
namespace {

// What the child reads (built by the parent: the child may not allocate) and the one thing it
// writes back. The child runs on a stack of its own but in the parent's memory.
struct ChildArgs {
  const char* path;
  char* const* argv;
  char* const* envp;
  int in;
  int out;
  int err;
  bool own_group;
  pid_t parent;  // > 0: die with it
  pid_t* announce_slot;
  volatile int error;  // errno of the step that failed; 0: the exec happened
};

[[noreturn]] void fail_child(ChildArgs& a) {
  a.error = errno != 0 ? errno : EINVAL;
  _exit(127);
}

// The child, between clone and exec: system calls only. Every signal is blocked when it
// starts (the parent blocked them around clone); handlers are reset first so that a signal can
// never run the parent's handler on this borrowed memory, then the worker gets a clean mask.
int child_main(void* arg) {
  auto& a = *static_cast<ChildArgs*>(arg);
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction old {};
    if (sigaction(s, nullptr, &old) != 0) continue;  // SIGKILL, SIGSTOP, glibc's own
    if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) signal(s, SIG_DFL);
  }
  if (a.own_group && setpgid(0, 0) != 0) fail_child(a);
  if (a.announce_slot != nullptr) {
    // Tell the guardian about this group before exec: if the agent is SIGKILLed before it
    // could do so itself, the group is still known. A store into memory the guardian shares:
    // no system call, nobody woken.
    std::atomic_ref<pid_t>(*a.announce_slot).store(getpid(), std::memory_order_release);
  }
  if (a.parent > 0) {
    die_with(a.parent);
    allow_tracing_by(a.parent);
  }
  if ((a.in != STDIN_FILENO && dup2(a.in, STDIN_FILENO) < 0) ||
      (a.out != STDOUT_FILENO && dup2(a.out, STDOUT_FILENO) < 0) ||
      (a.err != STDERR_FILENO && dup2(a.err, STDERR_FILENO) < 0)) {
    fail_child(a);
  }
  reset_signals_for_exec();  // the ignored ones (SIGPIPE, ...) and the mask
  close_on_exec_above_stderr();
  execve(a.path, a.argv, a.envp);
  fail_child(a);
}

std::vector<char*> pointers(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

ChildPipe::~ChildPipe() {
  close_read();
  close_write();
}

void ChildPipe::open() {
  if (pipe2(fds_, O_CLOEXEC) != 0) {
    throw Error("cannot create a pipe for a child's standard streams: " + errno_message(errno));
  }
}

int ChildPipe::release_read() { return std::exchange(fds_[0], -1); }
int ChildPipe::release_write() { return std::exchange(fds_[1], -1); }

void ChildPipe::close_read() {
  if (fds_[0] >= 0) close(std::exchange(fds_[0], -1));
}

void ChildPipe::close_write() {
  if (fds_[1] >= 0) close(std::exchange(fds_[1], -1));
}

pid_t spawn_process(const SpawnRequest& r) {
  if (r.argv.empty()) throw SpawnError(EINVAL, "cannot start " + r.path + ": no argv[0]");
  auto argv = pointers(r.argv);
  auto envp = r.env ? pointers(*r.env) : std::vector<char*>();
  int devnull = -1;
  if (r.stdin_fd < 0) {
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
      const int err = errno;
      throw SpawnError(err, "cannot start " + r.path + ": /dev/null: " + errno_message(err));
    }
  }
  ChildArgs a{};
  a.path = r.path.c_str();
  a.argv = argv.data();
  a.envp = r.env ? envp.data() : environ;
  a.in = r.stdin_fd < 0 ? devnull : r.stdin_fd;
  a.out = r.stdout_fd;
  a.err = r.stderr_fd;
  a.own_group = r.own_group;
  a.parent = r.die_with_parent ? getpid() : 0;
  a.announce_slot = r.announce_slot;
  a.error = 0;
  // The child's stack: it makes system calls only, a few hundred bytes deep.
  constexpr std::size_t kStackSize = 64 * 1024;
  auto stack = std::make_unique_for_overwrite<char[]>(kStackSize);
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  // CLONE_VFORK: this thread resumes once the child has called exec or exited.
  const pid_t pid =
      clone(child_main, stack.get() + kStackSize, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
  const int clone_error = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (devnull >= 0) close(devnull);
  if (pid < 0) {
    throw SpawnError(clone_error,
                     fmt::format("cannot start {}: {}", r.path, errno_message(clone_error)));
  }
  if (a.error != 0) {
    const int err = a.error;
    waitpid(pid, nullptr, 0);
    throw SpawnError(err, fmt::format("cannot run {}: {}", r.path, errno_message(err)));
  }
  return pid;
}

}  // namespace ddprun
