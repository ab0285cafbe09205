#pragma once
// Process resources: limits, and what the process has used.

#include <sys/resource.h>

namespace ddprun {

// Raises the soft limit on open files to the hard limit. Every agent holds a few store
// connections, so a store serving thousands of nodes needs more than the usual 1024.
// Returns the new soft limit (or the old one if it could not be raised). The limit it found
// is kept for the children (inherited_open_files_limit).
long raise_open_files_limit();

// The open-files limit this process was started with, which the programs it starts get back
// (the raise is the agent's need, not theirs: a worker that selects on descriptors, or sizes a
// table by the limit, must see what it would see without ddprun). Null when the limit was never
// raised. Read in a child between clone and exec: plain memory, no allocation.
const rlimit* inherited_open_files_limit();

// User plus system CPU seconds of every thread of this process so far (exited threads
// included, its children not), from getrusage.
double process_cpu_seconds();

}  // namespace ddprun
