#pragma once
// OrphanGuard: makes sure no worker outlives its agent, even when the agent is SIGKILLed.
//
// Each worker gets PR_SET_PDEATHSIG, but that reaches only the worker itself, not what it
// spawned. So at startup, before any thread exists, the agent forks a tiny guardian process that
// learns every worker's process group through a pipe. When the pipe closes (the agent exited,
// however it died), the guardian SIGKILLs every process group it still knows, then exits.

#include <sys/types.h>

namespace ddprun {

class OrphanGuard {
 public:
  // Forks the guardian. Call before creating threads. Throws Error if pipe or fork fail.
  OrphanGuard();
  // Closing the pipe is the guardian's signal: it kills the remaining groups and exits.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // A new worker process group to kill if the agent dies.
  void watch(pid_t pgid);
  // The group was stopped and reaped; forget it (its number may be reused).
  void forget(pid_t pgid);

  pid_t guardian_pid() const { return guardian_; }
  // The pipe's write end: a forked worker announces its own group on it before exec.
  int fd() const { return fd_; }

 private:
  void send(char op, pid_t pgid);

  int fd_ = -1;
  pid_t guardian_ = -1;
};

}  // namespace ddprun
