#pragma once
// What every child ddprun starts (a worker, a remote shell) does between fork and exec. Only
// async-signal-safe calls: these run in the forked child of a multi-threaded process.

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace ddprun {

// Death with the thread that started it (SIGKILL when it ends). Exits at once if that parent
// already died before the death signal was armed.
inline void die_with(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(128 + SIGKILL);
}

// Signal masks and ignored dispositions survive exec: give the program a clean slate.
inline void reset_signals_for_exec() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD}) {
    signal(s, SIG_DFL);
  }
}

}  // namespace ddprun
