#pragma once
// ProcessRunner: how the agent starts, watches and stops its workers. The agent sees only this
// interface, so its state machine is unit-tested with a fake runner and integration-tested with
// PosixProcessRunner.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/placement.hpp"
#include "process/console_fold.hpp"
#include "process/worker_output.hpp"
#include "process/stack_capture.hpp"

namespace ddprun {

// Where one worker's output goes.
struct OutputSpec {
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  std::string stdout_file;  // empty: not written to a file
  std::string stderr_file;
  // Console line prefix; "{time}" in it is replaced per line (local time, HH:MM:SS.mmm).
  std::string prefix;
  // The worker writes straight to the agent's stdout/stderr (no pipe, no prefix) for the
  // streams that go to the console and to no file.
  bool raw = false;
  // Called on the runner's thread whenever the worker writes to a captured stream: a sign of
  // progress for hang detection. Cheap and non-blocking, or the worker's output stalls.
  std::function<void()> on_output;
  // Called on the runner's thread with each whole line (or progress-bar state) of a captured
  // stream, without its newline: the last line `ddprun status` shows. Cheap, like on_output.
  std::function<void(std::string_view)> on_line;
  // Console lines equal to another rank's are folded (process/console_fold.hpp), per stream.
  FoldMode fold_stdout = FoldMode::kOff;
  FoldMode fold_stderr = FoldMode::kOff;
  // Non-empty: console lines are tagged for the command that folds them, with this host.
  std::string tag_host;
  // torchrun's duplicate filters: the console lines copied to a file the attempt's ranks share.
  std::shared_ptr<FilteredCopy> stdout_copy;
  std::shared_ptr<FilteredCopy> stderr_copy;
};

struct WorkerLaunch {
  int local_rank = 0;
  int rank = 0;
  std::vector<std::string> argv;  // argv[0] is looked up on PATH unless it contains a '/'
  std::vector<std::string> env;   // the complete environment, "KEY=VALUE"
  OutputSpec output;
  Placement placement;  // --numa-binding / --cpu-bind; empty: none
};

// How a worker ended. exit_code is the code of a normal exit; signal is non-zero when a signal
// ended it.
struct WorkerExit {
  int local_rank = 0;
  int rank = 0;
  int pid = 0;
  int exit_code = 0;
  int signal = 0;
  Clock::time_point when;
  std::vector<std::string> stderr_tail;  // the last lines it wrote to stderr, when captured
  bool out_of_memory = false;  // the kernel's OOM killer sent its SIGKILL (process/oom.hpp)

  bool succeeded() const { return signal == 0 && exit_code == 0; }
  // What a shell would report: the code, or 128+N for signal N.
  int shell_code() const { return signal != 0 ? 128 + signal : exit_code; }
};

// A worker that a stop could not reap: alive after SIGKILL (stuck in the kernel, state D), or
// a zombie that only the debugger tracing it may collect.
struct UnreapedWorker {
  int local_rank = 0;
  int rank = 0;
  int pid = 0;
  std::string whereabouts;  // process_whereabouts(): "state D in ...", "state Z, traced by ..."
};

// A worker program that cannot be started: exit_code is the shell's 127 (not found) or 126
// (not executable), and what() says which file, where it was looked for and why.
class CannotStartError : public Error {
 public:
  CannotStartError(int exit_code, const std::string& message)
      : Error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

class ProcessRunner {
 public:
  using ExitCallback = std::function<void(const WorkerExit&)>;

  virtual ~ProcessRunner() = default;

  // Starts every worker, each in its own process group. `on_exit` is called once per worker,
  // from the runner's own thread, as soon as the worker has exited and its output is drained.
  // Throws CannotStartError (naming the program, the local rank and the reason) if a worker
  // cannot be started, Error for other failures; the ones already started are stopped first.
  // Returns the pids in launch order.
  virtual std::vector<int> start(const std::vector<WorkerLaunch>& workers,
                                 ExitCallback on_exit) = 0;

  // Warm standby: a runner that keeps them (process/standby.hpp) starts one per launch in
  // `templates` now, ahead of the first start, and refills its pool after every start. The
  // launches' attempt variables do not matter. Empty `templates`: the next start is the last,
  // it uses the standbys there are and the pool ends with it. Returns at once; others ignore it.
  virtual void keep_standbys(const std::vector<WorkerLaunch>& /*templates*/) {}

  // Sends `signal` to every live worker's process group, waits up to `grace` for them to exit,
  // then SIGKILLs what remains (whole process groups, so grandchildren too). Blocks until every
  // worker of the last start() was reaped, or grace plus a few seconds passed. Exits that happen
  // during stop() are still reported through on_exit.
  //
  // Workers in `spared` (local ranks) are already failing on their own (they wrote their error
  // file): they are not sent `signal`, so that they end with their own exit code, but get the
  // same grace before SIGKILL.
  //
  // Returns the workers still not reaped when it gave up, named in a warning: the job goes on
  // without them (no later stop() or start() waits for them, and their exits are not reported;
  // they are reaped when they end). Throws Error only when the runner itself does not answer.
  virtual std::vector<UnreapedWorker> stop(int signal, Clock::duration grace,
                                           const std::vector<int>& spared) = 0;
  std::vector<UnreapedWorker> stop(int signal, Clock::duration grace) {
    return stop(signal, grace, {});
  }

  // Writes the stacks of live workers (by pid) into files, all within `deadline`, without
  // stopping them (process/stack_capture.hpp). One result per target, in order.
  virtual std::vector<StackCapture> capture_stacks(const std::vector<StackTarget>& targets,
                                                   Deadline deadline) = 0;
};

}  // namespace ddprun
