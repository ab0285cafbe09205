#pragma once
// What every child ddprun starts (a worker, a remote shell) does between clone and exec
// (process/spawn.cpp). System calls only: the child of a multi-threaded process, running in its
// parent's memory until exec.

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace ddprun {

// Death with the thread that started it (SIGKILL when it ends). Exits at once if that parent
// already died before the death signal was armed.
inline void die_with(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(128 + SIGKILL);
}

// Lets `tracer` and its descendants (the debugger the agent starts to capture a hung worker's
// stack) attach to this process where Yama restricts ptrace to descendants (ptrace_scope 1);
// the relation survives exec. Fails harmlessly (EINVAL) on a kernel without Yama.
inline void allow_tracing_by(pid_t tracer) { prctl(PR_SET_PTRACER, tracer, 0, 0, 0); }

// Signal masks and ignored dispositions survive exec: give the program a clean slate.
inline void reset_signals_for_exec() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD, SIGXFSZ}) {
    signal(s, SIG_DFL);
  }
}

// Every descriptor above stderr closes at exec: the agent's store sockets, its listening socket
// and other workers' pipes must not live on in a worker, or in a daemon that a worker leaves
// behind (which would keep the master port bound and the store's connections open). Marked,
// not closed, so that what still runs before exec keeps working.
inline void close_on_exec_above_stderr() {
#if defined(SYS_close_range)
  constexpr unsigned kCloseRangeCloexec = 1U << 2;  // CLOSE_RANGE_CLOEXEC, Linux 5.11
  if (syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec) == 0) return;
#endif
  // Older kernels: one fcntl per possible descriptor (EBADF for the unused ones).
  rlimit limit{};
  const int last = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                       ? static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20))
                       : 1 << 16;
  for (int fd = 3; fd < last; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace ddprun
