#include "process/spawn.hpp"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "common/limits.hpp"
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
  int channel;
  bool own_group;
  pid_t parent;  // > 0: die with it
  pid_t* announce_slot;
  // The placement, prepared by the parent: a CPU set of cpus_size bytes (null: none) and a
  // node mask of mem_maxnode bits (null: none).
  const rlimit* open_files;  // null: keep this process's limit
  const cpu_set_t* cpus;
  std::size_t cpus_size;
  const unsigned long* mem_nodes;
  unsigned long mem_maxnode;
  int mem_mode;
  volatile int error;  // errno of the step that failed; 0: the exec happened
  volatile const char* failed_step;  // what that step was doing, for the parent's message
};

constexpr int kChannelFd = 3;

// MPOL_PREFERRED_MANY (Linux 5.15): named here, since older kernel headers lack it.
constexpr int kMpolPreferredMany = 5;

[[noreturn]] void fail_child(ChildArgs& a, const char* step = nullptr) {
  a.error = errno != 0 ? errno : EINVAL;
  a.failed_step = step;
  _exit(127);
}

// --numa-binding / --cpu-bind. The CPU affinity is the binding; the memory policy only prefers
// its nodes (a rank whose node is full takes memory elsewhere rather than being killed), so a
// kernel that refuses it (no NUMA support, no MPOL_PREFERRED_MANY before Linux 5.15, a seccomp
// profile, a node without memory) leaves the default policy, which already allocates on the
// node of the CPU that first touches the memory.
void apply_placement(ChildArgs& a) {
  if (a.cpus != nullptr && sched_setaffinity(0, a.cpus_size, a.cpus) != 0) {
    fail_child(a, "setting its CPU affinity");
  }
  if (a.mem_nodes != nullptr) {
    syscall(SYS_set_mempolicy, a.mem_mode, a.mem_nodes, a.mem_maxnode);
  }
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
  apply_placement(a);
  if ((a.in != STDIN_FILENO && dup2(a.in, STDIN_FILENO) < 0) ||
      (a.out != STDOUT_FILENO && dup2(a.out, STDOUT_FILENO) < 0) ||
      (a.err != STDERR_FILENO && dup2(a.err, STDERR_FILENO) < 0)) {
    fail_child(a);
  }
  reset_signals_for_exec();  // the ignored ones (SIGPIPE, ...) and the mask
  close_on_exec_above_stderr();
  if (a.channel >= 0) {
    // dup2 onto itself would keep the close-on-exec mark.
    if (a.channel == kChannelFd ? fcntl(kChannelFd, F_SETFD, 0) != 0
                                : dup2(a.channel, kChannelFd) < 0) {
      fail_child(a, "keeping its channel to the agent open");
    }
  }
  // After the descriptors are marked: on an old kernel that takes a loop up to the limit.
  if (a.open_files != nullptr && setrlimit(RLIMIT_NOFILE, a.open_files) != 0) {
    fail_child(a, "restoring its open-files limit");
  }
  execve(a.path, a.argv, a.envp);
  fail_child(a);
}

// A Placement in the kernel's forms: a CPU set sized for the highest CPU and a node bit mask.
class PreparedPlacement {
 public:
  explicit PreparedPlacement(const Placement* p) {
    if (p == nullptr) return;
    if (!p->cpus.empty()) {
      const int count = *std::max_element(p->cpus.begin(), p->cpus.end()) + 1;
      cpus_.reset(CPU_ALLOC(count));
      if (!cpus_) throw Error("cannot allocate a CPU set of " + std::to_string(count) + " CPUs");
      cpus_size_ = CPU_ALLOC_SIZE(count);
      CPU_ZERO_S(cpus_size_, cpus_.get());
      for (int cpu : p->cpus) CPU_SET_S(cpu, cpus_size_, cpus_.get());
    }
    if (!p->mem_nodes.empty()) {
      constexpr int kBits = 8 * sizeof(unsigned long);
      const int highest = *std::max_element(p->mem_nodes.begin(), p->mem_nodes.end());
      nodes_.assign(highest / kBits + 1, 0);
      for (int node : p->mem_nodes) nodes_[node / kBits] |= 1UL << (node % kBits);
      // The kernel reads maxnode - 1 bits.
      maxnode_ = nodes_.size() * kBits + 1;
      mode_ = p->mem_nodes.size() == 1 ? MPOL_PREFERRED : kMpolPreferredMany;
    }
  }

  void fill(ChildArgs& a) const {
    a.cpus = cpus_.get();
    a.cpus_size = cpus_size_;
    a.mem_nodes = nodes_.empty() ? nullptr : nodes_.data();
    a.mem_maxnode = maxnode_;
    a.mem_mode = mode_;
  }

 private:
  struct CpuSetFree {
    void operator()(cpu_set_t* set) const { CPU_FREE(set); }
  };
  std::unique_ptr<cpu_set_t, CpuSetFree> cpus_;
  std::size_t cpus_size_ = 0;
  std::vector<unsigned long> nodes_;
  unsigned long maxnode_ = 0;
  int mode_ = MPOL_DEFAULT;
};

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
  a.channel = r.channel_fd;
  a.own_group = r.own_group;
  a.parent = r.die_with_parent ? getpid() : 0;
  a.announce_slot = r.announce_slot;
  a.open_files = inherited_open_files_limit();
  // Built here: the child may not allocate.
  PreparedPlacement placement(r.placement);
  placement.fill(a);
  a.error = 0;
  a.failed_step = nullptr;
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
    if (clone_error == EAGAIN || clone_error == ENOMEM) {
      throw SpawnError(clone_error,
                       fmt::format("cannot start {}: this node could not start another process "
                                   "({}: a limit on processes, ulimit -u or the cgroup's "
                                   "pids.max, or memory)",
                                   r.path, errno_message(clone_error)));
    }
    throw SpawnError(clone_error,
                     fmt::format("cannot start {}: {}", r.path, errno_message(clone_error)));
  }
  if (a.error != 0) {
    const int err = a.error;
    waitpid(pid, nullptr, 0);
    if (const char* step = const_cast<const char*>(a.failed_step)) {
      throw SpawnError(err, fmt::format("cannot start {}: {}: {}", r.path, step,
                                        errno_message(err)));
    }
    throw SpawnError(err, fmt::format("cannot run {}: {}", r.path, errno_message(err)));
  }
  return pid;
}

}  // namespace ddprun
