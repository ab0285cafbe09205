#pragma once
// What the kernel says of a thread of this process that does not answer: a log line then names
// the wait (reclaim, a lock another process holds, ...) instead of only the silence.

#include <sys/types.h>

#include <string>

namespace ddprun {

// "tid 1234, state D in folio_wait_bit_common": the thread's id, its state (R running,
// S sleeping, D in an uninterruptible wait, ...; "?" where it cannot be read) and the kernel
// function it waits in, where the kernel says. tid 0: "not started".
std::string thread_whereabouts(pid_t tid);

// The same for a process of any pid: "state Z", "state D in ...", with ", traced by pid 77
// (gdb)" when a tracer holds it (its exit is then the tracer's to collect first).
std::string process_whereabouts(pid_t pid);

}  // namespace ddprun
