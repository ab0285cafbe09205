#include "process/posix_process_runner.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include "process/exit_watch.hpp"
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/failure_record.hpp"
#include "common/progress.hpp"
#include "process/line_splitter.hpp"
#include "process/orphan_guard.hpp"
#include "process/program_check.hpp"
#include "process/oom.hpp"
#include "process/spawn.hpp"
#include "process/worker_output.hpp"

namespace ddprun {

namespace asio = boost::asio;

namespace {

// A failure to start a worker in the user's words: the system's reason, without the names of
// library internals (Boost's errors append "[system:N]").
std::string plain_reason(const WorkerLaunch& launch, const std::exception& e) {
  if (const auto* se = dynamic_cast<const boost::system::system_error*>(&e)) {
    return fmt::format("cannot run {}: {}", launch.argv.empty() ? "" : launch.argv[0],
                       se->code().message());
  }
  return e.what();
}

// The file to execute, looked up on the PATH the worker gets (as execvp would). The workers of
// a node usually share program and PATH: one search serves them all (each searched directory
// is a failed access(2)).
class ProgramResolver {
 public:
  std::string resolve(const std::string& program, const std::vector<std::string>& env) {
    std::string path_env;
    for (const auto& kv : env) {
      if (kv.starts_with("PATH=")) path_env = kv.substr(5);
    }
    if (!last_ || last_->program != program || last_->path_env != path_env) {
      auto check = check_program(program, path_env);
      if (check.exit_code != 0) throw CannotStartError(check.exit_code, check.message);
      last_ = Found{program, std::move(path_env), std::move(check.path)};
    }
    return last_->path;
  }

 private:
  struct Found {
    std::string program;
    std::string path_env;
    std::string path;
  };
  std::optional<Found> last_;
};

}  // namespace

class PosixProcessRunner::Impl {
 public:
  Impl(OrphanGuard* guard, std::chrono::milliseconds progress_interval)
      : guard_(guard), progress_interval_(progress_interval), work_(asio::make_work_guard(io_)) {
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    try {
      stop(SIGKILL, std::chrono::seconds(0));
    } catch (const std::exception& e) {
      spdlog::warn("stopping workers at exit: {}", e.what());
    }
    work_.reset();
    io_.stop();
    thread_.join();
  }

  std::vector<int> start(const std::vector<WorkerLaunch>& launches, ExitCallback on_exit) {
    quiet_.store(false, std::memory_order_relaxed);  // posted below: the runner sees it first
    auto task = std::make_shared<std::packaged_task<std::vector<int>()>>(
        [this, &launches, on_exit] { return launch_all(launches, on_exit); });
    auto result = task->get_future();
    asio::post(io_, [task] { (*task)(); });
    return result.get();
  }

  void stop(int signal, Clock::duration grace, const std::vector<int>& spared = {}) {
    // Every worker reported and its group ended by an earlier stop: nothing to do, and no
    // round trip to the runner's thread (the agent and this runner's destructor both stop).
    if (quiet_.load(std::memory_order_acquire)) return;
    auto done = std::make_shared<std::promise<void>>();
    auto future = done->get_future();
    asio::post(io_, [this, signal, grace, spared, done] { begin_stop(signal, grace, spared, done); });
    // Grace, then SIGKILL, then reaping: a SIGKILLed process is gone within milliseconds, so
    // a few seconds beyond the grace is already generous.
    const auto limit = grace + std::chrono::seconds(10);
    const auto deadline = Deadline::after(limit);
    ProgressClock progress(progress_interval_);
    while (future.wait_until(progress.slice(deadline).when()) != std::future_status::ready) {
      if (deadline.expired()) {
        throw Error(fmt::format("workers still not reaped {} after the stop signal",
                                format_duration(limit)));
      }
      if (!progress.due()) continue;
      const auto waited = progress.elapsed();
      spdlog::info("stopping workers: rank(s) {} have not exited {}s after {}{}",
                   fmt::join(running_ranks(), ", "),
                   std::chrono::duration_cast<std::chrono::seconds>(waited).count(),
                   signal_name(signal),
                   signal != SIGKILL && waited < grace
                       ? fmt::format(" (SIGKILL in {})", format_duration(grace - waited))
                       : std::string());
    }
  }

  // The global ranks of the workers that have not exited (asked on the runner thread).
  std::vector<int> running_ranks() {
    auto task = std::make_shared<std::packaged_task<std::vector<int>()>>([this] {
      std::vector<int> ranks;
      for (const auto& w : workers_) {
        if (!w->exited) ranks.push_back(w->launch.rank);
      }
      return ranks;
    });
    auto result = task->get_future();
    asio::post(io_, [task] { (*task)(); });
    if (result.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return {};
    return result.get();
  }

 private:
  struct Worker {
    WorkerLaunch launch;
    pid_t pid = 0;
    bool exited = false;
    bool reported = false;
    bool group_killed = false;
    bool signalled = false;  // this runner sent it a signal: its SIGKILL is not the OOM killer's
    ExitCallback on_exit;
    int status = 0;
    Clock::time_point exit_time;
    int open_streams = 0;
    pid_t* guard_slot = nullptr;  // where the orphan guard keeps its group (OrphanGuard)
    std::unique_ptr<ExitWatch> exit_watch;
    std::unique_ptr<WorkerOutput> out;
    std::unique_ptr<WorkerOutput> err;
    std::unique_ptr<asio::steady_timer> drain_timer;
  };

  // On the runner thread.
  std::vector<int> launch_all(const std::vector<WorkerLaunch>& launches, ExitCallback on_exit) {
    // Workers of the previous start() are normally all reported (the agent stops them first).
    // One that is not yet (a stop() that gave up) is killed and kept, with its own callback,
    // until it is: its pending wait must not outlive it.
    std::erase_if(retired_, [](const auto& w) { return w->reported; });
    for (auto& w : workers_) {
      if (w->reported) continue;
      kill(-w->pid, SIGKILL);
      retired_.push_back(std::move(w));
    }
    workers_.clear();
    std::vector<int> pids;
    ProgramResolver programs;
    oom_kills_ = oom_kill_count();
    for (const auto& launch : launches) {
      try {
        pids.push_back(launch_one(launch, on_exit, programs));
      } catch (const std::exception& e) {
        for (auto& w : workers_) {
          if (!w->exited) kill(-w->pid, SIGKILL);
        }
        const auto* cannot = dynamic_cast<const CannotStartError*>(&e);
        const auto* spawn = dynamic_cast<const SpawnError*>(&e);
        // Not the program's fault: the node was out of processes or memory for a moment.
        const bool no_room = spawn != nullptr && (spawn->error() == EAGAIN || spawn->error() == ENOMEM);
        throw CannotStartError(cannot ? cannot->exit_code()
                               : no_room ? kExitNoResources
                                         : kExitCannotStart,
                               fmt::format("worker local rank {}: {}", launch.local_rank,
                                           cannot ? e.what() : plain_reason(launch, e)));
      }
    }
    return pids;
  }

  int launch_one(const WorkerLaunch& launch, const ExitCallback& on_exit,
                 ProgramResolver& programs) {
    if (launch.argv.empty()) throw Error("empty command line");
    auto worker = std::make_unique<Worker>();
    worker->launch = launch;
    worker->on_exit = on_exit;
    const auto exe = programs.resolve(launch.argv[0], launch.env);
    std::vector<std::string> env = launch.env;
    if (guard_) env.push_back(guard_->marker());  // see OrphanGuard: found wherever they go

    const auto& o = launch.output;
    const bool pipe_out = !(o.raw && o.stdout_file.empty());
    const bool pipe_err = !(o.raw && o.stderr_file.empty());
    ChildPipe out_pipe;
    ChildPipe err_pipe;
    if (pipe_out) out_pipe.open();
    if (pipe_err) err_pipe.open();
    SpawnRequest request;
    request.path = exe;
    request.argv = launch.argv;
    request.argv[0] = request.path;
    request.env = std::move(env);
    request.stdout_fd = pipe_out ? out_pipe.write_end() : STDOUT_FILENO;
    request.stderr_fd = pipe_err ? err_pipe.write_end() : STDERR_FILENO;
    // It dies with this runner thread (which outlives every worker it started), and it tells
    // the guardian about its group itself before exec: spawn_process returns after that.
    worker->guard_slot = guard_ ? guard_->claim_slot() : nullptr;
    request.announce_slot = worker->guard_slot;
    if (!launch.placement.empty()) request.placement = &launch.placement;
    try {
      worker->pid = spawn_process(request);
    } catch (...) {
      if (guard_) guard_->forget(worker->guard_slot);
      throw;
    }
    out_pipe.close_write();
    err_pipe.close_write();
    const auto exited = [this, w = worker.get()](boost::system::error_code ec, int status) {
      // Runs on this thread, after this function. Aborted only when the watch is being
      // destroyed, and `w` with it.
      if (ec == asio::error::operation_aborted) return;
      w->exited = true;
      w->status = ec ? (128 + SIGKILL) << 8 : status;
      w->exit_time = Clock::now();
      if (ec) spdlog::warn("waiting for worker pid {} failed: {}", w->pid, ec.message());
      maybe_report(w);
    };
    worker->exit_watch = std::make_unique<ExitWatch>(io_, worker->pid, exited);

    auto* w = worker.get();
    if (pipe_out) {
      w->out = std::make_unique<WorkerOutput>(asio::readable_pipe(io_, out_pipe.release_read()),
                                              output_target(launch, false));
      ++w->open_streams;
    }
    if (pipe_err) {
      w->err = std::make_unique<WorkerOutput>(asio::readable_pipe(io_, err_pipe.release_read()),
                                              output_target(launch, true));
      ++w->open_streams;
    }
    workers_.push_back(std::move(worker));
    if (w->out) w->out->start([this, w] { stream_closed(w); });
    if (w->err) w->err->start([this, w] { stream_closed(w); });
    spdlog::debug("started worker local rank {} rank {} pid {}: {}", launch.local_rank,
                  launch.rank, w->pid, fmt::join(launch.argv, " "));
    return w->pid;
  }

  static OutputTarget output_target(const WorkerLaunch& launch, bool is_err) {
    const auto& o = launch.output;
    OutputTarget t;
    t.console_fd = (is_err ? o.stderr_to_console : o.stdout_to_console)
                       ? (is_err ? STDERR_FILENO : STDOUT_FILENO)
                       : -1;
    t.file = is_err ? o.stderr_file : o.stdout_file;
    t.prefix = o.prefix;
    t.keep_tail = is_err ? 20 : 0;
    t.on_output = o.on_output;
    t.on_line = o.on_line;
    return t;
  }

  void stream_closed(Worker* w) {
    --w->open_streams;
    maybe_report(w);
  }

  // A worker is reported once it exited and its pipes reached end of file, so its last lines
  // are printed before anything the agent says about its exit. A grandchild holding the pipes
  // open must not delay the report for long.
  void maybe_report(Worker* w) {
    if (!w->exited || w->reported) return;
    if (w->open_streams > 0) {
      if (!w->drain_timer) {
        w->drain_timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(200));
        w->drain_timer->async_wait([this, w](boost::system::error_code ec) {
          if (!ec) report(w);
        });
      }
      return;
    }
    report(w);
  }

  void report(Worker* w) {
    if (w->reported) return;
    w->reported = true;
    if (w->drain_timer) w->drain_timer->cancel();
    WorkerExit e;
    e.local_rank = w->launch.local_rank;
    e.rank = w->launch.rank;
    e.pid = w->pid;
    e.when = w->exit_time;
    if (WIFSIGNALED(w->status)) {
      e.signal = WTERMSIG(w->status);
      // One more OOM kill in the cgroup than when the workers started: this SIGKILL was the
      // kernel's (each kill is attributed once).
      if (e.signal == SIGKILL && !w->signalled && oom_kills_) {
        if (auto now = oom_kill_count(); now && *now > *oom_kills_) {
          e.out_of_memory = true;
          ++*oom_kills_;
        }
      }
    } else {
      e.exit_code = WEXITSTATUS(w->status);
    }
    if (w->err) e.stderr_tail = w->err->tail();
    if (w->on_exit) w->on_exit(e);
    check_stopped();
  }

  void begin_stop(int signal, Clock::duration grace, const std::vector<int>& spared,
                  std::shared_ptr<std::promise<void>> done) {
    stop_waiters_.push_back(std::move(done));
    for (auto& w : workers_) {
      if (w->exited) continue;
      if (std::find(spared.begin(), spared.end(), w->launch.local_rank) != spared.end()) {
        spdlog::info("rank {} is already exiting on its own: not "
                     "sending it {}, it has {} to exit", w->launch.rank, signal_name(signal),
                     format_duration(grace));
        continue;
      }
      w->signalled = true;
      kill(-w->pid, signal);
      if (signal == SIGKILL) continue;
      // A stopped process (SIGSTOP, Ctrl-Z) acts on the signal only once continued, and would
      // otherwise take the whole grace: as a shell does for a stopped job it signals.
      if (const int stop = stop_signal(w->pid)) {
        spdlog::info("rank {} (pid {}) is stopped by {}: continuing it so that it acts on {}",
                     w->launch.rank, w->pid, signal_name(stop), signal_name(signal));
      }
      kill(-w->pid, SIGCONT);
    }
    if (!check_stopped()) {
      kill_timer_.expires_after(grace);
      kill_timer_.async_wait([this, signal](boost::system::error_code ec) {
        if (ec) return;
        for (auto& w : workers_) {
          if (!w->exited && signal != SIGKILL) {
            spdlog::warn("worker local rank {} (pid {}) still running after the grace period: "
                         "sending SIGKILL", w->launch.local_rank, w->pid);
          }
          if (!w->exited) {
            w->signalled = true;
            kill(-w->pid, SIGKILL);
          }
        }
      });
    }
  }

  // Completes pending stop() calls once every worker was reported. Returns true if it did.
  bool check_stopped() {
    for (auto& w : workers_) {
      if (!w->reported) return false;
    }
    if (stop_waiters_.empty()) return true;
    kill_timer_.cancel();
    for (auto& w : workers_) {
      if (w->group_killed) continue;
      // Whatever the worker left in its group (grandchildren) goes with it, once.
      w->group_killed = true;
      kill(-w->pid, SIGKILL);
      if (guard_) guard_->forget(std::exchange(w->guard_slot, nullptr));
    }
    quiet_.store(std::all_of(retired_.begin(), retired_.end(), [](auto& w) { return w->reported; }),
                 std::memory_order_release);
    for (auto& p : stop_waiters_) p->set_value();
    stop_waiters_.clear();
    return true;
  }

  OrphanGuard* guard_;
  std::chrono::milliseconds progress_interval_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::steady_timer kill_timer_{io_};
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::shared_ptr<std::promise<void>>> stop_waiters_;
  std::vector<std::unique_ptr<Worker>> retired_;  // unreported workers of an earlier start()
  // The memory cgroup's OOM kills when the workers started, less those already attributed to
  // one; nullopt: not readable here. Runner thread only.
  std::optional<long> oom_kills_;
  // Set by the runner's thread when a stop completed with every worker reported and every
  // group ended; cleared by start(). Read by stop() on the caller's thread.
  std::atomic<bool> quiet_{true};
  std::thread thread_;
};

PosixProcessRunner::PosixProcessRunner(OrphanGuard* guard,
                                       std::chrono::milliseconds progress_interval)
    : impl_(std::make_unique<Impl>(guard, progress_interval)) {}
PosixProcessRunner::~PosixProcessRunner() = default;

std::vector<int> PosixProcessRunner::start(const std::vector<WorkerLaunch>& workers,
                                           ExitCallback on_exit) {
  return impl_->start(workers, std::move(on_exit));
}

void PosixProcessRunner::stop(int signal, Clock::duration grace,
                              const std::vector<int>& spared) {
  impl_->stop(signal, grace, spared);
}

std::vector<StackCapture> PosixProcessRunner::capture_stacks(
    const std::vector<StackTarget>& targets, Deadline deadline) {
  return ddprun::capture_stacks(targets, deadline);
}

}  // namespace ddprun
