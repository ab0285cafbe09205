#include "process/posix_process_runner.hpp"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>

#include <boost/asio.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <nlohmann/json.hpp>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/failure_record.hpp"
#include "common/progress.hpp"
#include "process/console_writer.hpp"
#include "process/exit_watch.hpp"
#include "process/line_splitter.hpp"
#include "process/orphan_guard.hpp"
#include "process/program_check.hpp"
#include "process/oom.hpp"
#include "process/spawn.hpp"
#include "process/standby.hpp"
#include "process/thread_state.hpp"
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
  Impl(OrphanGuard* guard, std::chrono::milliseconds progress_interval,
       std::optional<StandbyOptions> standby)
      : guard_(guard),
        progress_interval_(progress_interval),
        standby_(std::move(standby)),
        work_(asio::make_work_guard(io_)) {
    thread_ = std::thread([this] {
      thread_id_ = gettid();
      io_.run();
    });
  }

  ~Impl() {
    try {
      stop(SIGKILL, std::chrono::seconds(0));
    } catch (const std::exception& e) {
      spdlog::warn("stopping workers at exit: {}", e.what());
    }
    std::promise<void> dropped;
    asio::post(io_, [this, &dropped] {
      fold_.flush();  // lines that folded after the last worker's report (a grandchild's)
      asio::post(io_, [&dropped, gone = std::make_shared<std::vector<std::unique_ptr<Standby>>>(
                                     drop_standbys())] { dropped.set_value(); });
    });
    dropped.get_future().wait();
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

  void keep_standbys(const std::vector<WorkerLaunch>& templates) {
    if (!standby_) return;
    asio::post(io_, [this, templates] {
      if (templates.empty()) {
        pool_closed_ = true;  // the next start uses what is there and starts no more
        return;
      }
      for (const auto& t : templates) refill(t);  // a rank that has one keeps it
    });
  }

  std::vector<UnreapedWorker> stop(int signal, Clock::duration grace,
                                   const std::vector<int>& spared = {}) {
    // Every worker reported and its group ended by an earlier stop: nothing to do, and no
    // round trip to the runner's thread (the agent and this runner's destructor both stop).
    if (quiet_.load(std::memory_order_acquire)) return {};
    auto done = std::make_shared<std::promise<void>>();
    auto future = done->get_future();
    asio::post(io_, [this, signal, grace, spared, done] { begin_stop(signal, grace, spared, done); });
    // Grace, then SIGKILL, then reaping: a SIGKILLed process is gone within milliseconds, so
    // a few seconds beyond the grace is already generous.
    const auto limit = grace + std::chrono::seconds(10);
    const auto deadline = Deadline::after(limit);
    ProgressClock progress(progress_interval_);
    while (future.wait_until(progress.slice(deadline).when()) != std::future_status::ready) {
      if (deadline.expired()) return give_up(signal, limit);
      if (!progress.due()) continue;
      const auto waited = progress.elapsed();
      const auto running = running_ranks();
      spdlog::info("stopping workers: {} not exited {}s after {}{}",
                   running ? fmt::format("rank(s) {} have", fmt::join(*running, ", "))
                           : fmt::format("the runner's thread ({}) did not say within 1s which "
                                         "have",
                                         thread_whereabouts(thread_id_)),
                   std::chrono::duration_cast<std::chrono::seconds>(waited).count(),
                   signal_name(signal),
                   signal != SIGKILL && waited < grace
                       ? fmt::format(" (SIGKILL in {})", format_duration(grace - waited))
                       : std::string());
    }
    return {};
  }

  // The workers a stop gave up on, named in a warning: abandoned (see ProcessRunner::stop).
  std::vector<UnreapedWorker> give_up(int signal, Clock::duration limit) {
    auto unreaped = ask_runner_thread([this] {
      std::vector<UnreapedWorker> found;
      for (const auto& w : workers_) {
        if (w->reported || w->abandoned) continue;
        found.push_back({w->launch.local_rank, w->launch.rank, w->pid,
                         w->exited ? "exited, its output still open"
                                   : process_whereabouts(w->pid)});
        // Its exit, whenever it comes, is reported to nobody: whoever started it (an agent)
        // may be gone by then. Later stops do not wait for it again.
        w->abandoned = true;
        w->on_exit = nullptr;
      }
      check_stopped();
      return found;
    });
    if (!unreaped) {
      throw Error(fmt::format("stopping workers: the runner's thread ({}) has not answered for "
                              "{} after {}", thread_whereabouts(thread_id_),
                              format_duration(limit), signal_name(signal)));
    }
    for (const auto& u : *unreaped) {
      spdlog::warn("rank {} (local rank {}, pid {}) is still not reaped {} after {} and "
                   "SIGKILL ({}): going on without it; what it holds (GPU memory, ports, "
                   "files) stays held until it ends",
                   u.rank, u.local_rank, u.pid, format_duration(limit), signal_name(signal),
                   u.whereabouts);
    }
    return *unreaped;
  }

  // The global ranks of the workers that have not exited; nullopt when the runner's thread
  // does not answer.
  std::optional<std::vector<int>> running_ranks() {
    return ask_runner_thread([this] {
      std::vector<int> ranks;
      for (const auto& w : workers_) {
        if (!w->exited) ranks.push_back(w->launch.rank);
      }
      return ranks;
    });
  }

  // Runs `fn` on the runner's thread, which owns the workers, and returns what it returns;
  // nullopt when that thread does not answer within a second (it may be blocked, writing to a
  // console nobody reads).
  template <typename F>
  std::optional<std::invoke_result_t<F>> ask_runner_thread(F fn) {
    auto task = std::make_shared<std::packaged_task<std::invoke_result_t<F>()>>(std::move(fn));
    auto result = task->get_future();
    asio::post(io_, [task] { (*task)(); });
    if (result.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return std::nullopt;
    return result.get();
  }

 private:
  // A started process: a worker, or a standby. Once exited it stays a zombie until its group
  // was ended, or it is destroyed (ExitWatch::Reap::kByOwner), so that its pid, the number of
  // its group, is never another's while this runner may still signal the group: ending a
  // group after its leader was reaped could end an unrelated one that took the number.
  struct Worker {
    Worker() = default;
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;
    ~Worker() {
      if (exited && !collected) reap();
    }

    // Ends whatever is left in its group (grandchildren), once; the orphan guard then has
    // nothing more to end.
    void end_group() {
      if (group_killed) return;
      group_killed = true;
      ::kill(-pid, SIGKILL);
      forget_group();
      collect();
    }

    // Reaps it once it has exited and its group was ended: nothing signals the group after.
    void collect() {
      if (!exited || !group_killed || collected) return;
      reap();
    }

    // The orphan guard lets go of its group first: the guardian must not end a group whose
    // number may be another's.
    void reap() {
      forget_group();
      reap_exited(pid);
      collected = true;
    }

    void forget_group() {
      if (guard != nullptr) guard->forget(std::exchange(guard_slot, nullptr));
    }

    WorkerLaunch launch;
    pid_t pid = 0;
    bool exited = false;
    bool reported = false;
    bool abandoned = false;  // a stop gave up on it (give_up): nothing waits for it any more
    bool group_killed = false;
    bool collected = false;  // exited and reaped: its pid is no longer its own
    bool signalled = false;  // this runner sent it a signal: its SIGKILL is not the OOM killer's
    bool standby = false;  // waiting in the pool for a launch (launch.local_rank is its rank)
    ExitCallback on_exit;
    int status = 0;
    Clock::time_point exit_time;
    int open_streams = 0;
    pid_t* guard_slot = nullptr;  // where the orphan guard keeps its group (OrphanGuard)
    OrphanGuard* guard = nullptr;  // the runner's
    std::unique_ptr<ExitWatch> exit_watch;
    std::unique_ptr<WorkerOutput> out;
    std::unique_ptr<WorkerOutput> err;
    std::unique_ptr<asio::steady_timer> drain_timer;
    std::unique_ptr<asio::steady_timer> show_timer;  // see show_then_report
    std::shared_ptr<char> alive = std::make_shared<char>();  // for callbacks that may outlive it
  };

  // On the runner thread.
  std::vector<int> launch_all(const std::vector<WorkerLaunch>& launches, ExitCallback on_exit) {
    // Workers of the previous start() are normally all reported (the agent stops them first).
    // One that is not yet (a stop() that gave up on it) is killed and kept until it is
    // reaped: its pending wait must not outlive it.
    std::erase_if(retired_, [](const auto& w) { return w->reported; });
    for (auto& w : workers_) {
      if (w->reported) continue;
      w->end_group();
      retired_.push_back(std::move(w));
    }
    workers_.clear();
    refill_after_start_.clear();
    if (guard_ != nullptr) {
      if (started_) {
        guard_->end_leftovers();  // what the last attempt's workers left behind
      } else {
        sweep_zombies();  // and every kZombieSweep from now on
      }
    }
    started_ = true;
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
    // Once every worker is on its way, each rank's next standby, so that it is ready for a
    // failure soon after this start; until then the two share the CPU.
    for (const auto& launch : refill_after_start_) refill(launch);
    while (pool_closed_ && !standbys_.empty()) retire_standby(standbys_.begin());
    return pids;
  }

  int launch_one(const WorkerLaunch& launch, const ExitCallback& on_exit,
                 ProgramResolver& programs) {
    if (launch.argv.empty()) throw Error("empty command line");
    const auto exe = programs.resolve(launch.argv[0], launch.env);
    std::vector<std::string> env = launch.env;
    if (guard_) env.push_back(guard_->marker());  // see OrphanGuard: found wherever they go
    if (auto* w = hand_over(launch, exe, env, on_exit)) return w->pid;

    auto worker = std::make_unique<Worker>();
    worker->launch = launch;
    worker->on_exit = on_exit;
    StreamPipes pipes(launch.output);
    SpawnRequest request;
    request.path = exe;
    request.argv = launch.argv;
    request.argv[0] = request.path;
    request.env = std::move(env);
    pipes.attach(request);
    spawn(*worker, request, launch);
    pipes.close_write();
    auto* w = worker.get();
    workers_.push_back(std::move(worker));
    watch(w, pipes.out.release_read(), pipes.err.release_read());
    refill_after_start_.push_back(launch);
    spdlog::debug("started worker local rank {} rank {} pid {}: {}", launch.local_rank,
                  launch.rank, w->pid, fmt::join(launch.argv, " "));
    return w->pid;
  }

  // The pipes a worker's standard streams go through, where the agent captures them.
  struct StreamPipes {
    explicit StreamPipes(const OutputSpec& o)
        : piped_out(!(o.raw && o.stdout_file.empty())), piped_err(!(o.raw && o.stderr_file.empty())) {
      if (piped_out) out.open();
      if (piped_err) err.open();
    }
    void attach(SpawnRequest& request) {
      request.stdout_fd = piped_out ? out.write_end() : STDOUT_FILENO;
      request.stderr_fd = piped_err ? err.write_end() : STDERR_FILENO;
    }
    void close_write() {
      out.close_write();
      err.close_write();
    }
    bool piped_out;
    bool piped_err;
    ChildPipe out;
    ChildPipe err;
  };

  // Starts `request` as `w`'s process: in its own group, made known to the orphan guard, and
  // dying with this runner's thread (which outlives every process it started).
  void spawn(Worker& w, SpawnRequest& request, const WorkerLaunch& launch) {
    w.guard = guard_;
    w.guard_slot = guard_ ? guard_->claim_slot() : nullptr;
    request.announce_slot = w.guard_slot;
    if (!launch.placement.empty()) request.placement = &launch.placement;
    try {
      w.pid = spawn_process(request);
    } catch (...) {
      if (guard_) guard_->forget(w.guard_slot);
      throw;
    }
    try {
      watch_exit(w);
    } catch (const std::exception& e) {
      // An unwatched worker would run unsupervised: it does not run at all.
      ::kill(-w.pid, SIGKILL);
      reap_within(w.pid, std::chrono::seconds(5));
      if (guard_) guard_->forget(w.guard_slot);
      throw Error(fmt::format("cannot watch its process (pid {}) for its exit: {}", w.pid,
                              e.what()));
    }
  }

  void watch_exit(Worker& w) {
    w.exit_watch = std::make_unique<ExitWatch>(
        io_, w.pid, [this, w = &w](boost::system::error_code ec, int status) {
          // Runs on this thread. Aborted only when the watch is being destroyed, and `w`
          // with it.
          if (ec == asio::error::operation_aborted) return;
          w->exited = true;
          w->status = ec ? (128 + SIGKILL) << 8 : status;
          w->exit_time = Clock::now();
          // A failed wait (ECHILD) leaves nothing of it to reap, nor a group to end: its pid
          // may be another's by now.
          if (ec) {
            w->collected = true;
            w->group_killed = true;
            w->forget_group();
          }
          w->collect();
          if (w->out) w->out->drain();
          if (w->err) w->err->drain();
          if (ec) spdlog::warn("waiting for pid {} failed: {}", w->pid, ec.message());
          if (w->standby) {
            standby_exited(w);
          } else {
            maybe_report(w);
          }
        },
        ExitWatch::Reap::kByOwner);
  }

  // Reads a started worker's captured streams (-1: not captured).
  void watch(Worker* w, int out_fd, int err_fd) {
    if (out_fd >= 0) {
      w->out = std::make_unique<WorkerOutput>(asio::readable_pipe(io_, out_fd),
                                              output_target(w->launch, false));
      ++w->open_streams;
    }
    if (err_fd >= 0) {
      w->err = std::make_unique<WorkerOutput>(asio::readable_pipe(io_, err_fd),
                                              output_target(w->launch, true));
      ++w->open_streams;
    }
    if (w->out) w->out->start([this, w] { stream_closed(w); });
    if (w->err) w->err->start([this, w] { stream_closed(w); });
  }

  // --- Warm standby (process/standby.hpp), on this thread. ---

  struct Standby {
    std::uint64_t serial = 0;
    WorkerLaunch made_for;  // the launch it was made from
    std::unique_ptr<Worker> worker;  // moved out at the handover
    StreamPipes pipes;
    asio::streambuf received;
    std::unique_ptr<asio::local::stream_protocol::socket> channel;  // after `received`
    asio::steady_timer ready_timer;
    bool ready = false;
    bool timed_out = false;

    Standby(asio::io_context& io, const WorkerLaunch& launch)
        : made_for(launch), pipes(launch.output), ready_timer(io) {}
  };

  // The standby of `launch.local_rank` becomes the worker of `launch`, when it serves it. Null:
  // start it cold (no standby, or one made for another command line or environment).
  Worker* hand_over(const WorkerLaunch& launch, const std::string& exe,
                    const std::vector<std::string>& env, const ExitCallback& on_exit) {
    auto it = standbys_.find(launch.local_rank);
    if (it == standbys_.end()) return nullptr;
    Standby& s = *it->second;
    if (!standby_serves(s.made_for, launch, *standby_)) {
      spdlog::info("warm standby for local rank {} (pid {}) was made for another command line "
                   "or environment: starting the worker cold", launch.local_rank, s.worker->pid);
      retire_standby(it);
      return nullptr;
    }
    auto orig_argv = launch.argv;
    orig_argv[0] = exe;
    std::string message;
    try {
      message = standby_handover_message(env, orig_argv);
    } catch (const nlohmann::json::exception&) {
      spdlog::info("local rank {}: the environment or command line is not UTF-8, which a warm "
                   "standby cannot take: its starts are cold", launch.local_rank);
      standby_off_.insert(launch.local_rank);
      retire_standby(it);
      return nullptr;
    }
    boost::system::error_code ec;
    const bool gone = s.worker->exited || s.timed_out;
    if (!gone) asio::write(*s.channel, asio::buffer(message), ec);
    if (gone || ec) {
      spdlog::warn("warm standby for local rank {} (pid {}) is gone: starting the worker cold",
                   launch.local_rank, s.worker->pid);
      retire_standby(it);
      return nullptr;
    }
    s.ready_timer.cancel();
    auto worker = std::move(s.worker);
    worker->standby = false;
    worker->launch = launch;
    worker->on_exit = on_exit;
    auto* w = worker.get();
    workers_.push_back(std::move(worker));
    watch(w, s.pipes.out.release_read(), s.pipes.err.release_read());
    // What is written stays readable after the close.
    later_destroy(std::move(it->second));
    standbys_.erase(it);
    refill_after_start_.push_back(launch);
    spdlog::debug("started worker local rank {} rank {} pid {} from its warm standby",
                  launch.local_rank, launch.rank, w->pid);
    return w;
  }

  // Starts the standby of `made_for.local_rank` unless it has one (or has none any more).
  void refill(const WorkerLaunch& made_for) {
    const int local = made_for.local_rank;
    if (!standby_ || pool_closed_ || standby_off_.count(local) || standbys_.count(local)) return;
    try {
      start_standby(made_for);
    } catch (const std::exception& e) {
      spdlog::warn("warm standby for local rank {}: {}: its restarts start cold", local, e.what());
      standby_off_.insert(local);
    }
  }

  void start_standby(const WorkerLaunch& made_for) {
    const int local = made_for.local_rank;
    auto launch = standby_launch(made_for, *standby_);
    if (!launch) return;
    const auto plan = standby_plan_message(made_for, *standby_);  // throws on non-UTF-8
    auto s = std::make_unique<Standby>(io_, made_for);
    s->serial = ++standby_serial_;
    s->worker = std::make_unique<Worker>();
    s->worker->standby = true;
    s->worker->launch.local_rank = local;
    int channel[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) != 0) {
      spdlog::warn("warm standby for local rank {}: cannot make its channel: {}", local,
                   errno_message(errno));
      return;
    }
    SpawnRequest request;
    request.argv = launch->argv;
    request.env = launch->env;
    if (guard_) request.env->push_back(guard_->marker());
    request.env->push_back("DDPRUN_STANDBY_FD=3");
    request.channel_fd = channel[1];
    s->pipes.attach(request);
    try {
      ProgramResolver programs;
      request.path = programs.resolve(launch->argv[0], launch->env);
      request.argv[0] = request.path;
      spawn(*s->worker, request, *launch);
    } catch (const std::exception& e) {
      close(channel[0]);
      close(channel[1]);
      spdlog::warn("warm standby for local rank {}: {}: its restarts start cold", local, e.what());
      standby_off_.insert(local);
      return;
    }
    close(channel[1]);
    s->pipes.close_write();
    s->channel = std::make_unique<asio::local::stream_protocol::socket>(
        io_, asio::local::stream_protocol(), channel[0]);
    boost::system::error_code write_error;  // a standby gone at once: its exit says why
    asio::write(*s->channel, asio::buffer(plan), write_error);
    auto& ref = *s;
    standbys_[local] = std::move(s);
    spdlog::debug("warm standby for local rank {}: pid {}", local, ref.worker->pid);
    read_channel(local, ref.serial);
    ref.ready_timer.expires_after(standby_->ready_timeout);
    ref.ready_timer.async_wait([this, local, serial = ref.serial](boost::system::error_code ec) {
      auto* late = find_standby(local, serial);
      if (ec || late == nullptr || late->ready) return;
      spdlog::warn("warm standby for local rank {} (pid {}) is not ready after {}: ending it",
                   local, late->worker->pid, format_duration(standby_->ready_timeout));
      late->timed_out = true;
      kill(-late->worker->pid, SIGKILL);
    });
  }

  // The pool's standby of `local` with this serial, null if gone.
  Standby* find_standby(int local, std::uint64_t serial) {
    auto it = standbys_.find(local);
    return it != standbys_.end() && it->second->serial == serial ? it->second.get() : nullptr;
  }

  // A line from the standby: "ready", or "failed ...".
  void read_channel(int local, std::uint64_t serial) {
    auto* standby = find_standby(local, serial);
    asio::async_read_until(
        *standby->channel, standby->received, '\n',
        [this, local, serial](boost::system::error_code ec, std::size_t n) {
          auto* s = find_standby(local, serial);
          // Aborted, gone, or its end closed (it exited: its exit watch says how).
          if (ec || s == nullptr) return;
          std::string line(asio::buffers_begin(s->received.data()),
                           asio::buffers_begin(s->received.data()) + n - 1);
          s->received.consume(n);
          if (line != "ready") {
            standby_failed(local, serial, line);
            return;
          }
          s->ready = true;
          standby_failures_[local] = 0;
        });
  }

  // Its imports failed: no standby for this rank again (the next would fail the same way). One
  // already handed over never says so: it runs the program, as a cold start would.
  void standby_failed(int local, std::uint64_t serial, const std::string& why) {
    auto* s = find_standby(local, serial);
    spdlog::warn("warm standby for local rank {} (pid {}): {}: its restarts start cold", local,
                 s->worker->pid, why);
    standby_off_.insert(local);
    retire_standby(standbys_.find(local));
  }

  // A standby ended before any handover.
  void standby_exited(Worker* w) {
    if (auto r = std::find_if(retired_standbys_.begin(), retired_standbys_.end(),
                              [w](const auto& s) { return s->worker.get() == w; });
        r != retired_standbys_.end()) {
      later_destroy(std::move(*r));
      retired_standbys_.erase(r);
      return;
    }
    const int local = w->launch.local_rank;
    auto it = standbys_.find(local);
    if (it == standbys_.end() || it->second->worker.get() != w) return;
    auto& s = *it->second;
    const auto how = s.timed_out ? std::string("not ready in time")
                     : WIFSIGNALED(w->status)
                         ? killed_by(WTERMSIG(w->status), false)
                         : fmt::format("exit code {}", WEXITSTATUS(w->status));
    const int failures = ++standby_failures_[local];
    const auto made_for = s.made_for;
    if (failures >= kStandbyAttempts) {
      spdlog::warn("warm standby for local rank {} (pid {}) ended before it was used ({}), {} "
                   "times in a row: its restarts start cold", local, w->pid, how, failures);
      standby_off_.insert(local);
      retire_standby(it);
      return;
    }
    spdlog::warn("warm standby for local rank {} (pid {}) ended before it was used ({}): "
                 "starting another", local, w->pid, how);
    retire_standby(it);
    refill(made_for);
  }

  // Ends a pool standby (its whole group, whatever it left behind) and lets go of it: at once
  // when it has exited, once reaped otherwise.
  void retire_standby(std::map<int, std::unique_ptr<Standby>>::iterator it) {
    auto s = std::move(it->second);
    standbys_.erase(it);
    s->worker->end_group();
    if (s->worker->exited) {
      later_destroy(std::move(s));
      return;
    }
    retired_standbys_.push_back(std::move(s));
  }

  // Destroyed after the handler that let go of it returns (its exit watch may be calling).
  void later_destroy(std::unique_ptr<Standby> s) {
    asio::post(io_, [s = std::shared_ptr<Standby>(std::move(s))] {
      if (s->worker) s->worker->forget_group();
    });
  }

  // At the runner's end: every standby and its group, SIGKILLed and reaped. Returned to be
  // destroyed after the handlers already queued for them have run.
  std::vector<std::unique_ptr<Standby>> drop_standbys() {
    std::vector<std::unique_ptr<Standby>> all;
    for (auto& [local, s] : standbys_) all.push_back(std::move(s));
    standbys_.clear();
    for (auto& s : retired_standbys_) all.push_back(std::move(s));
    retired_standbys_.clear();
    for (auto& s : all) {
      const bool exited = s->worker->exited;
      s->worker->exit_watch.reset();
      if (!exited) {
        kill(-s->worker->pid, SIGKILL);
        if (!reap_within(s->worker->pid, std::chrono::seconds(5))) {
          spdlog::warn("warm standby pid {} not gone 5s after SIGKILL", s->worker->pid);
          continue;  // the orphan guard still knows its group
        }
      }
      s->worker->forget_group();
    }
    return all;
  }

  OutputTarget output_target(const WorkerLaunch& launch, bool is_err) {
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
    t.rank = launch.rank;
    t.fold_mode = is_err ? o.fold_stderr : o.fold_stdout;
    if (t.fold_mode != FoldMode::kOff) t.fold = &fold_;
    t.console = &console_;
    t.copy = is_err ? o.stderr_copy : o.stdout_copy;
    t.tag_host = o.tag_host;
    return t;
  }

  void stream_closed(Worker* w) {
    --w->open_streams;
    maybe_report(w);
  }

  // A worker is reported once it exited, its pipes reached end of file and what they held
  // reached the console, so its last lines are printed before anything the agent says about
  // its exit. Neither a grandchild holding the pipes open nor a console that takes nothing
  // may delay the report for long.
  void maybe_report(Worker* w) {
    if (!w->exited || w->reported) return;
    if (w->open_streams > 0) {
      if (!w->drain_timer) {
        w->drain_timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(200));
        w->drain_timer->async_wait([this, w, alive = std::weak_ptr<char>(w->alive)](
                                       boost::system::error_code ec) {
          if (!ec && !alive.expired()) show_then_report(w);
        });
      }
      return;
    }
    show_then_report(w);
  }

  void show_then_report(Worker* w) {
    if (w->reported || w->show_timer) return;
    auto last = std::max(w->out ? w->out->last_console_batch() : 0,
                         w->err ? w->err->last_console_batch() : 0);
    // What is folded is summarized before anything is said about a failure, and when the
    // last worker is done: its lines held by the fold among them.
    const bool failed = WIFSIGNALED(w->status) || WEXITSTATUS(w->status) != 0;
    if (failed || std::all_of(workers_.begin(), workers_.end(),
                              [](const auto& other) { return other->exited; })) {
      fold_.flush();
      last = std::max(last, fold_last_batch_);
    }
    if (last == 0) {  // nothing of it for the console
      report(w);
      return;
    }
    const std::weak_ptr<char> alive = w->alive;
    console_.after_written(last, [this, w, alive] {
      if (!alive.expired()) report(w);
    });
    w->show_timer = std::make_unique<asio::steady_timer>(io_, kShowWait);
    w->show_timer->async_wait([this, w, alive](boost::system::error_code ec) {
      if (!ec && !alive.expired()) report(w);
    });
  }

  void report(Worker* w) {
    if (w->reported) return;
    w->reported = true;
    if (w->show_timer) w->show_timer->cancel();
    if (w->abandoned) {  // nobody waits for it; the attempt's output is not cut short for it
      check_stopped();
      return;
    }
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

  // Collects adopted zombies now and then: a worker's descendants that outlive their parent
  // come to the agent (a subreaper), and some exit long before the attempt ends.
  void sweep_zombies() {
    reap_adopted_zombies();
    sweep_timer_.expires_after(kZombieSweep);
    sweep_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) sweep_zombies();
    });
  }

  // Completes pending stop() calls once every worker was reported (or given up on). Returns
  // true if it did.
  bool check_stopped() {
    for (auto& w : workers_) {
      if (!w->reported && !w->abandoned) return false;
    }
    if (stop_waiters_.empty()) return true;
    kill_timer_.cancel();
    for (auto& w : workers_) {
      w->end_group();
    }
    quiet_.store(std::all_of(retired_.begin(), retired_.end(),
                             [](auto& w) { return w->reported || w->abandoned; }),
                 std::memory_order_release);
    for (auto& p : stop_waiters_) p->set_value();
    stop_waiters_.clear();
    return true;
  }

  // A rank whose standby ended this many times in a row before it was used has no more.
  static constexpr int kStandbyAttempts = 3;

  OrphanGuard* guard_;
  std::chrono::milliseconds progress_interval_;
  std::optional<StandbyOptions> standby_;  // nullopt: no warm standby
  std::map<int, std::unique_ptr<Standby>> standbys_;  // the pool, by local rank
  std::vector<std::unique_ptr<Standby>> retired_standbys_;  // SIGKILLed, until reaped
  std::set<int> standby_off_;  // local ranks that start cold from now on
  std::map<int, int> standby_failures_;  // by local rank, in a row
  std::uint64_t standby_serial_ = 0;
  bool pool_closed_ = false;  // keep_standbys({}): no restart can follow
  std::vector<WorkerLaunch> refill_after_start_;  // the current start()'s launches
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::steady_timer kill_timer_{io_};
  asio::steady_timer sweep_timer_{io_};
  static constexpr auto kZombieSweep = std::chrono::seconds(5);
  // How long a worker's report waits for its last lines to reach a console that does not
  // keep up (ConsoleWriter).
  static constexpr auto kShowWait = std::chrono::seconds(1);
  bool started_ = false;  // a start() ran: the next one follows an attempt
  // Outlive the workers' outputs, which point to them.
  ConsoleWriter console_{io_.get_executor(), write_all};
  ConsoleFold fold_{io_.get_executor(), [this](int fd, std::string_view text) {
                      fold_last_batch_ = console_.write(fd, std::string(text));
                    }};
  std::uint64_t fold_last_batch_ = 0;  // the last batch fold_ gave console_
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
  std::atomic<pid_t> thread_id_{0};  // thread_'s, for what the kernel says of it
};

PosixProcessRunner::PosixProcessRunner(OrphanGuard* guard,
                                       std::chrono::milliseconds progress_interval,
                                       std::optional<StandbyOptions> standby)
    : impl_(std::make_unique<Impl>(guard, progress_interval, std::move(standby))) {}
PosixProcessRunner::~PosixProcessRunner() = default;

std::vector<int> PosixProcessRunner::start(const std::vector<WorkerLaunch>& workers,
                                           ExitCallback on_exit) {
  return impl_->start(workers, std::move(on_exit));
}

void PosixProcessRunner::keep_standbys(const std::vector<WorkerLaunch>& templates) {
  impl_->keep_standbys(templates);
}

std::vector<UnreapedWorker> PosixProcessRunner::stop(int signal, Clock::duration grace,
                                                     const std::vector<int>& spared) {
  return impl_->stop(signal, grace, spared);
}

std::vector<StackCapture> PosixProcessRunner::capture_stacks(
    const std::vector<StackTarget>& targets, Deadline deadline) {
  return ddprun::capture_stacks(targets, deadline);
}

}  // namespace ddprun
