#pragma once
// The one way tests and benchmarks start a program and watch it: posix_spawn in a process group
// of its own, waited on through a pidfd (an exit is seen the moment it happens, no polling),
// timed on CLOCK_MONOTONIC (the clock of ddprun's --events-file and bench_worker's stamps), and
// killed with its group when it is still running at destruction.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::test {

// CLOCK_MONOTONIC in seconds: system-wide, comparable between processes.
double mono_now();

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH
  // Set (or replace) in the child's environment, on top of this process's environment, less
  // the variables that change what ddprun does (PYTHON_EXEC, PET_*, TORCHELASTIC_*,
  // DDPRUN_TOKEN): a test gives those it depends on here, so that the caller's shell cannot
  // change its outcome.
  std::vector<std::pair<std::string, std::string>> env;
  // stdout and stderr are appended here; empty: /dev/null. No other descriptor is inherited.
  std::string output;
  // When given, stderr is appended here instead, so that stdout can be parsed on its own.
  std::string errors = {};
};

class Child {
 public:
  // Throws ddprun::Error naming the program when it cannot be started.
  explicit Child(const SpawnSpec& spec);
  // A child still running gets SIGKILL (its whole process group) and is reaped.
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for the exit at most `timeout`; returns the wait status, or nullopt if it still runs.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // The wait status; throws ddprun::TimeoutError naming the program after `timeout`.
  int wait(std::chrono::milliseconds timeout);
  bool exited() const { return status_.has_value(); }
  // mono_now() at the moment the wait saw the exit.
  double exit_mono() const { return exit_mono_; }
  void signal(int sig);        // the process only
  void signal_group(int sig);  // its process group (workers of torchrun included)

 private:
  std::string name_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<int> status_;
  double exit_mono_ = 0;
};

// A wait status as a shell would show it: the exit code, or 128+N for signal N.
int exit_code(int status);

}  // namespace ddprun::test
