#include "process/orphan_guard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/random.hpp"
#include "common/remove_tree.hpp"
#include "process/exit_watch.hpp"

namespace ddprun {
namespace {

// The guardian's state, at the start of the memory it runs in (OrphanGuard::region_). The
// fds and the marker are written by the agent before the clone; the fields after them are
// shared while both run, each accessed through std::atomic_ref only.
struct GuardianState {
  int read_fd;
  int write_fd;  // the agent's end: the guardian closes its own copy
  std::size_t marker_size;
  char marker[64];     // "DDPRUN_GUARD=<hex>"
  pid_t killed[4096];  // what the sweep killed, to count each process once (guardian only)
  // 1 once `scratch` holds the agent's scratch directory (OrphanGuard::remove_if_abandoned);
  // 0 again when the agent ends alive and removes it itself.
  int scratch_set;
  char scratch[PATH_MAX];
  // 1 once `socket` holds a file of the agent's to unlink (OrphanGuard::unlink_if_abandoned).
  int socket_set;
  char socket[PATH_MAX];
  // How many of `groups` were ever claimed: the guardian reads the slots below it.
  std::uint32_t slots_used;
  // The workers' process groups, a slot per worker alive (0: free): each worker stores its own
  // pid before exec (spawn.cpp), the agent clears it once the group is gone. Room for far more
  // than a node has workers; only the pages of the slots used are ever touched.
  pid_t groups[std::size_t{1} << 18];
};

template <class T>
std::atomic_ref<T> shared(T& field) {
  return std::atomic_ref<T>(field);
}

// The region: this state, an inaccessible page, the stack (which grows down towards that page).
// Reserved, not committed: only the pages used are ever touched.
constexpr std::size_t kPage = 4096;
constexpr std::size_t kGuardPageOffset = (sizeof(GuardianState) + kPage - 1) / kPage * kPage;
constexpr std::size_t kStackSize = 128 * 1024;
constexpr std::size_t kRegionSize = kGuardPageOffset + kPage + kStackSize;

// What the guardian calls. It shares the agent's memory and its main thread's thread-local
// storage, so it uses no libc function that allocates, locks or is a cancellation point (those
// touch the thread's own state): raw system calls through syscall(2), whose only side effect is
// errno on failure. See OrphanGuard::finish for when that can happen.
long sys_read(int fd, void* buf, std::size_t n) { return syscall(SYS_read, fd, buf, n); }
void sys_write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const long w = syscall(SYS_write, fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}
int sys_open(const char* path, int flags) {
  return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags));
}
void sys_close(int fd) { syscall(SYS_close, fd); }
bool sys_kill(pid_t pid, int signo) { return syscall(SYS_kill, pid, signo) == 0; }

// A decimal pid from a directory entry's name; -1 when the name is not one.
pid_t parse_pid(const char* name) {
  long value = 0;
  if (*name == '\0') return -1;
  for (; *name != '\0'; ++name) {
    if (*name < '0' || *name > '9' || value > 100000000) return -1;
    value = value * 10 + (*name - '0');
  }
  return static_cast<pid_t>(value);
}

// Whether /proc/PID/environ holds the entry `marker` exactly: read in chunks, each byte moving
// a match along the current entry. False when the process is gone, a zombie, or not readable.
bool environ_holds(pid_t pid, const char* marker, std::size_t size) {
  char path[40] = "/proc/";
  char* end = std::to_chars(path + 6, path + sizeof(path) - 10, pid).ptr;
  std::memcpy(end, "/environ", sizeof("/environ"));
  const int fd = sys_open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  std::size_t at = 0;   // position in the current entry
  bool matching = true;  // the current entry equals the marker so far
  bool found = false;
  for (long n; !found && (n = sys_read(fd, buf, sizeof(buf))) > 0;) {
    for (long i = 0; i < n; ++i) {
      if (buf[i] == '\0') {
        if (matching && at == size) {
          found = true;
          break;
        }
        at = 0;
        matching = true;
      } else {
        matching = matching && at < size && buf[i] == marker[at];
        ++at;
      }
    }
  }
  sys_close(fd);
  return found || (matching && at == size);
}

// SIGKILLs every other process whose environment holds the marker, scanning /proc again until
// a scan finds none (one killed while forking leaves a marked child), at most `rounds` scans.
// A killed process that is not yet reaped still shows its environment; later scans see it
// again until it is a zombie, so a few rounds are normal. Returns how many processes it killed.
std::size_t kill_marked(GuardianState& s, int rounds) {
  const auto self = static_cast<pid_t>(syscall(SYS_getpid));
  std::size_t distinct = 0;
  for (int round = 0; round < rounds; ++round) {
    const int dir = sys_open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) break;
    int found = 0;
    alignas(dirent64) char entries[8192];
    for (long n; (n = syscall(SYS_getdents64, dir, entries, sizeof(entries))) > 0;) {
      for (long off = 0; off < n;) {
        const auto* entry = reinterpret_cast<const dirent64*>(entries + off);
        off += entry->d_reclen;
        const pid_t pid = parse_pid(entry->d_name);
        if (pid <= 0 || pid == self || !environ_holds(pid, s.marker, s.marker_size)) continue;
        if (!sys_kill(pid, SIGKILL)) continue;
        ++found;
        const pid_t* seen = std::find(s.killed, s.killed + distinct, pid);
        if (seen == s.killed + distinct) {
          if (distinct < std::size(s.killed)) s.killed[distinct] = pid;
          distinct = std::min(distinct + 1, std::size(s.killed));
        }
      }
    }
    sys_close(dir);
    if (found == 0) break;
  }
  return distinct;
}

// The guardian: waits for the pipe to close, then does what the header says. The pipe
// carries one thing only: "=", the agent's word that it ends with nothing of the job left.
int guardian_main(void* arg) {
  auto& s = *static_cast<GuardianState*>(arg);
  sys_close(s.write_fd);
  syscall(SYS_prctl, PR_SET_NAME, "ddprun-guard", 0, 0, 0);
  // A Ctrl-C on the terminal reaches the whole foreground group: the guardian must outlive the
  // agent's own shutdown, so it ignores the usual stop signals (SIGKILL still works). Its
  // dispositions are its own (no CLONE_SIGHAND; sigaction(2) only converts its argument for
  // the kernel), and an ignored signal never interrupts a read.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int signo : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) sigaction(signo, &ignore, nullptr);
  bool clean_end = false;
  char buf[64];
  for (long n; (n = sys_read(s.read_fd, buf, sizeof(buf))) > 0;) {
    clean_end = clean_end || std::find(buf, buf + n, '=') != buf + n;
  }
  // The agent ended with no process left below it: nothing of the job is left anywhere, and
  // the groups it never forgot are empty. Exits without a call that could fail (errno).
  if (clean_end) _exit(0);
  const std::size_t used =
      std::min<std::size_t>(shared(s.slots_used).load(std::memory_order_acquire),
                            std::size(s.groups));
  for (std::size_t i = 0; i < used; ++i) {
    const pid_t group = shared(s.groups[i]).load(std::memory_order_acquire);
    if (group > 0) sys_kill(-group, SIGKILL);
  }
  if (const std::size_t killed = kill_marked(s, 50); killed > 0) {
    char note[160];
    constexpr std::string_view kHead = "ddprun-guard: the agent is gone; ended ";
    constexpr std::string_view kTail = " process(es) its workers had left running\n";
    char* p = std::copy(kHead.begin(), kHead.end(), note);
    p = std::to_chars(p, p + 24, killed).ptr;
    p = std::copy(kTail.begin(), kTail.end(), p);
    sys_write_all(STDERR_FILENO, note, static_cast<std::size_t>(p - note));
  }
  // Its depth: the run's, the attempt's and the worker's directories, and their files.
  if (shared(s.scratch_set).load(std::memory_order_acquire) != 0) {
    remove_tree(AT_FDCWD, s.scratch, 6);  // its failure sets errno: the agent is gone
  }
  if (shared(s.socket_set).load(std::memory_order_acquire) != 0) {
    syscall(SYS_unlinkat, AT_FDCWD, s.socket, 0);
  }
  _exit(0);
}

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t group = 0;
  pid_t session = 0;
  char state = 0;  // R, S, D, Z, ...
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
  info = {pid, ppid, group, session, state, stat.substr(open + 1, close - open - 1)};
  return true;
}

// The whole of a small file (/proc); nullopt when it cannot be opened.
std::optional<std::string> read_small_file(const std::string& path) {
  std::string text;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR);) {
    if (n > 0) text.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return text;
}

// This process's children. The kernel lists them in /proc/self/task/TID/children (one file per
// thread: a child belongs to the thread that forked it or adopted it); a kernel built without
// CONFIG_PROC_CHILDREN has no such files, and then every process's parent is read instead
// (/proc/*/stat: a read per process on the machine).
std::vector<pid_t> child_pids() {
  std::vector<pid_t> pids;
  bool listed = false;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* task = readdir(tasks)) {
      if (task->d_name[0] == '.') continue;
      const auto text =
          read_small_file(fmt::format("/proc/self/task/{}/children", task->d_name));
      if (!text) continue;  // no such file, or the thread ended
      listed = true;
      for (const char* p = text->c_str(); *p != '\0';) {
        char* end = nullptr;
        const long pid = std::strtol(p, &end, 10);
        if (end == p) break;
        pids.push_back(static_cast<pid_t>(pid));
        p = end;
      }
    }
    closedir(tasks);
  }
  if (listed) return pids;
  const pid_t self = getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    ProcessInfo info;
    const auto pid = static_cast<pid_t>(std::atol(name.c_str()));
    if (read_process(pid, info) && info.ppid == self) pids.push_back(pid);
  }
  return pids;
}

// This process's children in another session, but `skip`.
std::vector<ProcessInfo> adopted_daemons(pid_t skip) {
  const pid_t own_session = getsid(0);
  std::vector<ProcessInfo> found;
  for (const pid_t pid : child_pids()) {
    ProcessInfo info;
    if (pid != skip && read_process(pid, info) && info.session != own_session) {
      found.push_back(std::move(info));
    }
  }
  return found;
}

}  // namespace

int stop_adopted_daemons(int rounds, pid_t skip, const std::string& marker) {
  std::vector<std::string> ended;
  std::set<pid_t> tried;  // one stuck in the kernel is waited for once, not every round
  for (int round = 0; round < rounds; ++round) {
    auto daemons = adopted_daemons(skip);
    // Reading a process's environment waits for its memory map's lock, which one stuck in
    // the kernel (state D) may hold: such a one is left to the job's end.
    std::erase_if(daemons, [&](const ProcessInfo& d) {
      return tried.contains(d.pid) ||
             (!marker.empty() &&
              (d.state == 'D' || !environ_holds(d.pid, marker.data(), marker.size())));
    });
    if (daemons.empty()) break;
    for (const auto& d : daemons) kill(d.pid, SIGKILL);
    for (const auto& d : daemons) {
      reap_within(d.pid, std::chrono::seconds(5));
      tried.insert(d.pid);
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

int reap_adopted_zombies() {
  const pid_t own_group = getpgrp();
  const pid_t own_session = getsid(0);
  int reaped = 0;
  for (const pid_t pid : child_pids()) {
    ProcessInfo info;
    if (!read_process(pid, info) || info.state != 'Z') continue;
    // What this process started itself leads a group of its own in this session (workers,
    // debuggers) or shares this process's group (the guardian): its owner waits for it.
    if (info.group == own_group || (info.group == pid && info.session == own_session)) continue;
    if (waitpid(pid, nullptr, WNOHANG) == pid) ++reaped;
  }
  return reaped;
}

OrphanGuard::OrphanGuard() {
  // Random, so that only this agent's descendants carry it (and nothing can guess it).
  marker_ = "DDPRUN_GUARD=" + random_hex(12);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw Error("orphan guard: pipe failed: " + errno_message(errno));
  }
  void* region = mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED ||
      mprotect(static_cast<char*>(region) + kGuardPageOffset, kPage, PROT_NONE) != 0) {
    const int err = errno;
    if (region != MAP_FAILED) munmap(region, kRegionSize);
    close(fds[0]);
    close(fds[1]);
    throw Error("orphan guard: cannot map the guardian's memory: " + errno_message(err));
  }
  auto* base = static_cast<char*>(region);
  // Default-initialized, not value-initialized: zeroing the arrays would touch every page of
  // them (the mapping reads as zeros anyway). The scalars are set here.
  auto* state = new (base) GuardianState;
  state->read_fd = fds[0];
  state->write_fd = fds[1];
  state->marker_size = std::min(marker_.size(), sizeof(state->marker) - 1);
  std::memcpy(state->marker, marker_.data(), state->marker_size);
  state->scratch_set = 0;
  state->socket_set = 0;
  state->slots_used = 0;
  // SIGCHLD: an ordinary child, reaped with waitpid. No CLONE_FILES or CLONE_SIGHAND: its
  // descriptors and dispositions are copies, so the agent's later ones never reach it.
  guardian_ = clone(guardian_main, base + kRegionSize, CLONE_VM | SIGCHLD, state);
  if (guardian_ < 0) {
    const int err = errno;
    munmap(region, kRegionSize);
    close(fds[0]);
    close(fds[1]);
    throw Error("orphan guard: cannot start the guardian: " + errno_message(err));
  }
  region_ = region;
  close(fds[0]);
  fd_ = fds[1];
  // Orphaned descendants of the workers become this process's children (see the header).
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

OrphanGuard::~OrphanGuard() {
  finish();
  reap_guardian();
  // The guardian is gone: nothing runs on its stack any more.
  if (region_ != nullptr) munmap(region_, kRegionSize);
}

void OrphanGuard::finish() {
  if (fd_ < 0) return;
  // First the adopted daemons, named in a warning; the guardian then finds only what escaped
  // this process (reparented elsewhere) and still carries the marker.
  auto only_guardian = [this](const std::vector<pid_t>& children) {
    return children.size() == 1 && children[0] == guardian_;
  };
  auto children = child_pids();
  if (!only_guardian(children)) {
    stop_adopted_daemons(20, guardian_);
    children = child_pids();
  }
  // A subreaper's descendants stay below it while it lives: with no child left but the
  // guardian, none of the job's processes is left anywhere, and the guardian's sweep of every
  // process's environment (proportional to all processes on the machine) is skipped. A child
  // that exits while the list is read may hide another from that read, hence two reads.
  const bool clean = only_guardian(children) && only_guardian(child_pids());
  if (clean) {
    while (write(fd_, "=", 1) < 0 && errno == EINTR) {
    }
  } else {
    // This agent is alive and removes its scratch directory and its socket itself.
    shared(static_cast<GuardianState*>(region_)->scratch_set).store(0, std::memory_order_release);
    shared(static_cast<GuardianState*>(region_)->socket_set).store(0, std::memory_order_release);
  }
  close(std::exchange(fd_, -1));
  // Told "=", the guardian exits without another system call that could fail; otherwise it
  // kills and sweeps, and its failed calls (a process already gone) set the errno it shares
  // with this thread: this thread waits for it instead of running on.
  if (!clean) reap_guardian();
}

void OrphanGuard::reap_guardian() {
  if (guardian_ <= 0) return;
  while (waitpid(guardian_, nullptr, 0) < 0 && errno == EINTR) {
  }
  guardian_ = -1;
}

pid_t* OrphanGuard::claim_slot() {
  auto& state = *static_cast<GuardianState*>(region_);
  std::lock_guard lock(slots_mutex_);
  if (!free_slots_.empty()) {
    const auto slot = free_slots_.back();
    free_slots_.pop_back();
    return &state.groups[slot];
  }
  const auto used = shared(state.slots_used).load(std::memory_order_relaxed);
  if (used >= std::size(state.groups)) return nullptr;
  // Raised before the worker can write the slot: the guardian reads every slot below it.
  shared(state.slots_used).store(used + 1, std::memory_order_release);
  return &state.groups[used];
}

void OrphanGuard::end_leftovers() {
  // Only what carries this agent's marker: an agent that is a container's first process
  // adopts every orphan there (an sshd its entrypoint started), and the job goes on.
  stop_adopted_daemons(20, guardian_, marker_);
  reap_adopted_zombies();
}

void OrphanGuard::forget(pid_t* slot) {
  if (slot == nullptr) return;
  auto& state = *static_cast<GuardianState*>(region_);
  shared(*slot).store(0, std::memory_order_release);
  std::lock_guard lock(slots_mutex_);
  free_slots_.push_back(static_cast<std::uint32_t>(slot - state.groups));
}

void OrphanGuard::unlink_if_abandoned(const std::string& file) {
  auto* state = static_cast<GuardianState*>(region_);
  if (fd_ < 0 || state == nullptr || file.empty() || file.front() != '/' ||
      file.size() >= sizeof(state->socket)) {
    return;
  }
  std::memcpy(state->socket, file.c_str(), file.size() + 1);
  shared(state->socket_set).store(1, std::memory_order_release);
}

void OrphanGuard::remove_if_abandoned(const std::string& dir) {
  auto* state = static_cast<GuardianState*>(region_);
  std::error_code ec;
  const auto path = std::filesystem::absolute(dir, ec).string();  // TMPDIR may be relative
  if (fd_ < 0 || state == nullptr || ec || path.size() >= sizeof(state->scratch)) return;
  std::memcpy(state->scratch, path.c_str(), path.size() + 1);
  // Set after the path is in place: a guardian that sees the flag sees the whole path.
  shared(state->scratch_set).store(1, std::memory_order_release);
}

}  // namespace ddprun
