#pragma once
// OrphanGuard: makes sure no worker outlives its agent, even when the agent is SIGKILLed.
//
// Each worker gets PR_SET_PDEATHSIG, but that reaches only the worker itself, not what it
// spawned. So at startup, before any thread exists, the agent starts a tiny guardian process
// that shares its memory and holds a pipe from it. Every worker writes its own process group
// into a slot of that memory before exec (claim_slot); when the pipe closes (the agent exited,
// however it died), the guardian SIGKILLs every group still in a slot, then exits. Slots, not
// lines on the pipe: announcing a worker costs no system call and does not wake the guardian,
// a process of its own, on a CPU busy with the workers' execs.
//
// Daemons that a worker starts leave its process group and session (setsid), so the groups do
// not reach them. Two things catch those:
//  - the agent is a child subreaper: such a process, once its parent is gone, becomes the
//    agent's child, and the agent ends every adopted child of another session before an
//    attempt's workers start again and when it ends normally or is stopped by a signal (with a
//    warning naming them); adopted children that exit are collected as they go;
//  - every worker's environment carries a marker, DDPRUN_GUARD=<random>, which its
//    descendants inherit wherever they move: when the pipe closes, the guardian also SIGKILLs
//    every process whose environment holds this agent's marker. That covers a SIGKILLed agent,
//    whose adopted children would otherwise pass to init. A descendant that clears its
//    environment (env -i, some daemons' own sanitizing) escapes both only in that case.
// When the agent ends with no child left but the guardian, it tells the guardian so ("=", the
// one thing ever written on the pipe) and the guardian exits at once: nothing of the job can be
// left anywhere. An agent that dies unheard also leaves its scratch log directory (console-only
// jobs keep the workers' error files there, in /dev/shm): the guardian removes it too.
//
// The guardian is a process that shares the agent's memory (clone with CLONE_VM, like the
// first half of a vfork) instead of a fork of it: no page tables to copy, no copy-on-write
// faults in the agent afterwards and no second address space to tear down at the end, all of
// which a launch would pay for. It stays a process of its own (its own
// descriptors, signal dispositions and pid), so it survives the agent, whose memory then stays
// mapped for it. The price is a discipline, kept in orphan_guard.cpp: the guardian runs on a
// stack of its own and calls only raw system calls (no malloc, no stdio, nothing that takes a
// lock or keeps state in the agent's memory), and it shares the agent's errno, so it makes no
// call that can fail while the agent's threads still run (see OrphanGuard::finish).

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ddprun {

// SIGKILLs and reaps this process's children that run in another session than its own: what
// a worker left behind after detaching itself, adopted by this subreaper. Repeats until none is
// left (a daemon's own children are adopted when it dies), for at most `rounds` scans. Returns
// how many were ended; names them in a warning. `skip`: a child to leave alone (the guardian).
// A non-empty `marker` ("DDPRUN_GUARD=..."): only the children whose environment holds it.
int stop_adopted_daemons(int rounds = 20, pid_t skip = -1, const std::string& marker = {});

// Collects this process's zombie children that it did not start: the workers' descendants
// that outlived their own parent, adopted by this subreaper, then exited. Without it they stay
// in the process table (and count against a container's process limit) until the agent ends.
// Returns how many.
int reap_adopted_zombies();

class OrphanGuard {
 public:
  // Starts the guardian. Call before creating threads. Throws Error if that fails.
  OrphanGuard();
  // finish() if not done yet, then waits for the guardian to exit.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // The end of the job, once every worker is reaped and no runner can announce or forget a
  // group any more: ends the adopted daemons (stop_adopted_daemons), then closes the pipe. With
  // nothing of the job left the guardian just exits, while the agent goes on to report (the
  // destructor reaps it); otherwise it kills the groups and sweeps for the marker, and this
  // waits for it.
  void finish();

  // A place for one worker's process group in the guardian's memory: the worker stores its
  // pid there itself, before exec (SpawnRequest::announce_slot), so no window exists in which
  // the agent could die unheard. nullptr when every slot is taken (2^18 workers alive at once);
  // such a worker is then found by the marker sweep only.
  pid_t* claim_slot();
  // The worker's group was stopped and reaped: its number may be reused, and the slot too.
  void forget(pid_t* slot);

  // Between attempts, once the workers were stopped: ends what they left running in sessions
  // of their own (stop_adopted_daemons, only those with this agent's marker) and collects
  // adopted zombies, so that the next attempt starts as the first did.
  void end_leftovers();

  // `dir` is this agent's scratch directory (made for this run only): if the agent dies
  // without finish() (SIGKILL, a crash), the guardian removes it with everything in it. Call
  // once, with nothing else in the directory's path that other programs may change under it.
  void remove_if_abandoned(const std::string& dir);
  // `file` (an absolute path: the agent's control socket) is unlinked by the guardian if the
  // agent dies without finish(). Call once.
  void unlink_if_abandoned(const std::string& file);

  pid_t guardian_pid() const { return guardian_; }
  // "DDPRUN_GUARD=<random>": put in every worker's environment (PosixProcessRunner does).
  const std::string& marker() const { return marker_; }
  // The pipe's write end (close-on-exec): a child forked by hand must close it, or the pipe
  // stays open as long as that child lives.
  int fd() const { return fd_; }

 private:
  void reap_guardian();

  int fd_ = -1;
  pid_t guardian_ = -1;
  std::string marker_;
  void* region_ = nullptr;  // the guardian's stack and state (see orphan_guard.cpp)
  std::mutex slots_mutex_;
  std::vector<std::uint32_t> free_slots_;  // forgotten slots, below the high-water mark
};

}  // namespace ddprun
