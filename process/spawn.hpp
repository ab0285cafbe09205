#pragma once
// Starting a child program the way posix_spawn does (clone with CLONE_VM | CLONE_VFORK: the
// child borrows the parent's memory until it calls exec, so nothing is copied and no page of
// the agent is faulted in again), with what ddprun needs between clone and exec that
// posix_spawn cannot express: death with the starting thread (PR_SET_PDEATHSIG), the new
// process group made known to the orphan guard before exec, and every descriptor above stderr
// closed at exec. An exec failure is reported to the caller synchronously (the parent resumes
// only after the child's exec or exit), so no pipe is read to learn whether the exec worked.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/placement.hpp"

namespace ddprun {

struct SpawnRequest {
  std::string path;               // the file to execute (no PATH search here)
  std::vector<std::string> argv;  // argv[0] included
  // NAME=VALUE each; none: this process's own environment.
  std::optional<std::vector<std::string>> env;
  // The child's standard streams: descriptors of this process, duplicated onto 0, 1 and 2.
  // -1 for stdin: /dev/null. A descriptor equal to its target is inherited as it is.
  int stdin_fd = -1;
  int stdout_fd = 1;
  int stderr_fd = 2;
  bool own_group = true;  // setpgid(0, 0): a process group of its own, led by the child
  bool die_with_parent = true;  // SIGKILL when the thread that started it ends
  // Not null: the child stores its pid there (atomically) before exec: its slot in the orphan
  // guard's memory, which the child shares until exec (OrphanGuard::claim_slot).
  pid_t* announce_slot = nullptr;
  // Not null: the CPUs the child may run on and the NUMA nodes its memory is preferably taken
  // from, set before exec so that the program's first thread and allocation already obey them.
  const Placement* placement = nullptr;
  // >= 0: a descriptor of this process that the child keeps open across exec as descriptor 3
  // (a warm standby's channel to the agent, process/standby.hpp).
  int channel_fd = -1;
};

// The exec (or the child's setup) failed; `error()` is its errno.
class SpawnError : public Error {
 public:
  SpawnError(int error, const std::string& message) : Error(message), error_(error) {}
  int error() const { return error_; }

 private:
  int error_;
};

// A pipe between this process and a child: both ends close-on-exec; the child's end is handed
// to spawn_process (which duplicates it onto 0, 1 or 2) and closed here once the child has it.
class ChildPipe {
 public:
  ChildPipe() = default;
  ~ChildPipe();
  ChildPipe(const ChildPipe&) = delete;
  ChildPipe& operator=(const ChildPipe&) = delete;

  void open();  // throws Error
  int read_end() const { return fds_[0]; }
  int write_end() const { return fds_[1]; }
  // Gives up this object's ownership of one end (for an asio pipe object that takes it).
  int release_read();
  int release_write();
  void close_read();
  void close_write();

 private:
  int fds_[2] = {-1, -1};
};

// Starts the program; returns its pid once it has called exec. Throws SpawnError when the
// child could not be created or its exec failed (the failed child is reaped here).
pid_t spawn_process(const SpawnRequest& request);

}  // namespace ddprun
