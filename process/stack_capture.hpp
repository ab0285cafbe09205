#pragma once
// Stacks of live processes, taken with the system's debugger: `gdb -batch` attaches, prints,
// and detaches, so the process goes on as before. For a Python interpreter it prints every
// Python thread's frames (read from the interpreter's thread states with the gdb extension
// Debian ships with python3.11-dbg) and the native frames of every thread, without the shared
// libraries' symbols; for any other program, the native frames of every thread with every
// symbol. Processes are captured in parallel, within one deadline for all of them, each into a
// file of its own.

#include <optional>
#include <string>
#include <vector>

#include "common/deadline.hpp"

namespace ddprun {

struct StackTarget {
  int pid = 0;
  std::string file;  // where the debugger's output goes (created or truncated)
};

struct StackCapture {
  int pid = 0;
  std::string file;
  bool python = false;  // the process is a Python interpreter: Python frames were asked for
  bool ok = false;      // the debugger ran to its end and exited 0
  std::string error;    // when !ok: why (no debugger, it failed, it ran past the deadline)
  double seconds = 0;   // how long this process's capture took
};

// Why no stack can be taken on this host (gdb is not on PATH), or nullopt when one can.
std::optional<std::string> stacks_unavailable();

// Captures every target at once. Returns when each debugger has ended, or at `deadline`, when
// those still running are killed (a killed debugger detaches: the kernel resumes its
// process). One result per target, in order. Never throws for one target's failure. Calls in
// one process take turns (a debugger cannot attach to a process another holds), the wait
// counted against the deadline.
std::vector<StackCapture> capture_stacks(const std::vector<StackTarget>& targets,
                                         Deadline deadline);

}  // namespace ddprun
