#include "agent/attempt.hpp"

#include <signal.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "agent/failure.hpp"
#include "agent/file_timer.hpp"
#include "agent/rank_stacks.hpp"
#include "agent/stack_report.hpp"
#include "agent/status_board.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"

namespace ddprun {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// How long the peers of a failed worker get to end on their own before their stacks are taken
// (with --hang-timeout on): a peer that lost its partner in a collective usually fails within
// milliseconds; one still alive after this is blocked, or elsewhere.
constexpr auto kPeerGrace = 3s;
// The whole capture's bound, however many workers and however slow the debugger.
constexpr auto kCaptureBudget = 30s;
// How long a node whose own failure decided the round waits for its watcher to read that
// outcome too, so that the watcher's connection carries its arrival: the store has answered
// the watcher already, and the wait ends as soon as the watcher's thread does.
constexpr auto kWatcherGrace = 5s;

}  // namespace

Attempt::Attempt(const LaunchConfig& config, AgentContext& ctx, const Round& round,
                 EventQueue& events, const std::atomic<int>& signal, SideConnection& side,
                 Emit emit, WorkerProgress& progress, FileTimerServer* timers)
    : config_(config),
      ctx_(ctx),
      round_(round),
      events_(events),
      signal_(signal),
      side_(side),
      emit_(std::move(emit)),
      progress_(progress),
      timers_(timers),
      channel_(*ctx.store, round, config.rdzv_conf.read_timeout),
      dir_(ctx.log_dir, round.id),
      hang_(config, round, ctx.host, channel_, progress, timers, emit_) {}

Attempt::~Attempt() { teardown(); }

void Attempt::teardown(Clock::duration watcher_grace) {
  keep_alive_.reset();
  if (watcher_) {
    if (auto idle = watcher_->release_when_idle(Deadline::after(watcher_grace))) {
      ctx_.spare_watch_store = std::move(idle);
    }
    watcher_.reset();
  }
}

Failure Attempt::failure(Failure::Kind kind, int exit_code, const std::string& message) const {
  return agent_failure(ctx_.host, round_.ranks.group_rank, round_.restart_count, kind, exit_code,
                       message);
}

AttemptOutcome Attempt::decide(const std::string& value) const {
  if (value == kRoundSucceeded) return AttemptOutcome::succeeded();
  return AttemptOutcome::failed(Failure::from_json(value));
}

// First writer wins: the value in the store after our compare_set is the round's outcome.
AttemptOutcome Attempt::publish(const Failure& f) {
  const auto json = f.to_json();
  const auto value = channel_.publish_outcome(json);
  outcome_mine_ = value == json;
  return decide(value);
}

AttemptOutcome Attempt::run() {
  start_watching();
  auto outcome = wait_for_outcome(start_workers());
  emit_("attempt_decided",
        {{"attempt", round_.id},
         {"success", outcome.success},
         {"root_cause", outcome.success ? nlohmann::json()
                                        : nlohmann::json::parse(outcome.failure.to_json())}});
  if (!outcome.success) take_stacks(outcome.failure);
  stop_workers();
  // A worker failure or a hang was decided in the store (the nodes settle it next): the
  // watcher reads it as well, if it has not already.
  const bool settles = !outcome.success && !outcome.store_lost &&
                       (outcome.failure.kind == Failure::Kind::kWorker ||
                        outcome.failure.kind == Failure::Kind::kHang);
  teardown(settles ? Clock::duration(kWatcherGrace) : Clock::duration::zero());
  if (timers_ != nullptr) timers_->forget(workers_.pids);
  if (settles) {
    // Stacks are taken after a hang, or after any failure with --hang-timeout (the same on
    // every node: the settings are compared at the rendezvous). Without them there is no
    // node's `where` record to read, and reading them would cost the chooser a request per node.
    std::function<void(Failure&)> refine;
    if (takes_stacks(outcome.failure)) {
      refine = [this](Failure& f) {
        explain_root_cause(f, channel_.all_where(), round_, dir_, config_.hang_timeout.count() > 0);
      };
    }
    auto settled = Settler(config_, ctx_, round_, channel_, side_, signal_)
                       .settle(outcome.failure, outcome_mine_,
                               config_.shutdown_timeout + kCaptureBudget + 10s, refine);
    outcome.failure = std::move(settled.root_cause);
    outcome.end = std::move(settled.end);
  }
  return outcome;
}

// The outcome watcher and the keep-alive report into the agent's queue, which outlives this
// attempt, tagged with the round. A static round of one node has nobody else to decide its
// outcome (a node that joins re-forms only an elastic round): it needs no watcher, and no
// thread for one.
void Attempt::start_watching() {
  if (round_.ranks.group_world_size > 1 || ctx_.rendezvous->can_reform()) {
    auto store = std::move(ctx_.spare_watch_store);
    OutcomeWatcher::Reopen reopen;
    if (store) {
      reopen = [open = ctx_.open_store, timeout = config_.rdzv_conf.read_timeout] {
        return open(Deadline::after(timeout));
      };
    }
    try {
      if (!store) store = ctx_.open_store(Deadline::after(config_.rdzv_conf.read_timeout));
    } catch (const Error& e) {
      throw ConnectionError(std::string("cannot open the outcome watcher's connection: ") +
                            e.what());
    }
    watcher_ = std::make_unique<OutcomeWatcher>(std::move(store), channel_.outcome_key(),
                                                round_.id, events_, std::move(reopen));
  }
  const int round = round_.id;
  auto& events = events_;
  keep_alive_ = ctx_.rendezvous->keep_alive(
      round_,
      [&events, round](int group_rank) {
        AgentEvent e;
        e.kind = AgentEvent::Kind::kNodeLost;
        e.round = round;
        e.node = group_rank;
        events.push(e);
      },
      [&events, round](std::string message) {
        AgentEvent e;
        e.kind = AgentEvent::Kind::kStoreLost;
        e.round = round;
        e.text = std::move(message);
        events.push(e);
      });
}

// Handles events until the round's outcome is decided. Once this node's workers all succeeded,
// it waits for the others at most the exit barrier, saying now and then which nodes it waits for.
AttemptOutcome Attempt::wait_for_outcome(std::optional<AttemptOutcome> outcome) {
  while (!outcome) {
    auto wait = barrier_ ? *barrier_ : Deadline::after(1h);
    if (barrier_progress_) wait = barrier_progress_->slice(wait);
    const auto hang_due = hang_.due(workers_);
    if (hang_due) wait = wait.min(*hang_due);
    auto event = events_.pop(wait);
    if (event) {
      outcome = handle(*event);
    } else if (hang_due && hang_due->expired()) {
      if (auto hang = hang_.check(workers_)) outcome = publish(*hang);
    } else if (barrier_ && barrier_->expired()) {
      outcome = on_barrier_expired();
    } else if (barrier_progress_ && barrier_progress_->due()) {
      barrier_progress();
    }
  }
  return *outcome;
}

// Group rank 0 publishes the port right after the rendezvous; if it has not within the
// keep-alive deadline it is gone, and waiting longer would only hang. A node that decides the
// round before the port is published (one leaving, or the first here to give up) withdraws the
// port, which ends every other node's wait at once. A port the round already carries
// (offer_next_master_port) is not read again.
std::optional<int> Attempt::agree_master_port(AttemptOutcome& failed) {
  if (round_.ranks.group_rank == 0) {
    channel_.publish_master_port(round_.master_port ? *round_.master_port
                                                    : ctx_.open_workers_store());
  }
  if (round_.master_port) return round_.master_port;
  const auto& conf = config_.rdzv_conf;
  const auto wait = conf.keep_alive_interval * std::max(1, conf.keep_alive_max_attempt) + 5s;
  std::optional<int> port;
  try {
    port = channel_.master_port(Deadline::after(wait));
  } catch (const TimeoutError&) {
    auto f = failure(ctx_.rendezvous->can_reform() ? Failure::Kind::kMembership
                                                   : Failure::Kind::kAgent,
                     kExitRendezvous,
                     fmt::format("node 0 ({}) did not publish the workers' master port within {}",
                                 round_.host_of(0), format_duration(wait)));
    f.lost_node = 0;
    failed = publish(f);
    try {
      channel_.withdraw_master_port();
    } catch (const Error& e) {
      // The others find the outcome anyway, by their own deadline.
      spdlog::warn("could not withdraw the workers' master port: {}", e.what());
    }
    return std::nullopt;
  }
  if (port) return port;
  // Withdrawn after the outcome was published: it is there to read.
  failed = decide(channel_.outcome(Deadline::after(conf.read_timeout)));
  return std::nullopt;
}

std::optional<AttemptOutcome> Attempt::start_workers() {
  AttemptOutcome failed;
  const auto master_port = agree_master_port(failed);
  if (!master_port) return failed;
  const auto& r = round_.ranks;
  progress_.restart(round_.id);
  OutputHooks hooks;
  if (config_.hang_timeout.count() > 0) hooks.on_output = progress_.sink();
  if (ctx_.status != nullptr) {
    hooks.on_line = [status = ctx_.status](int local) { return status->line_hook(local); };
  }
  auto launches = make_worker_launches(config_, ctx_, round_, *master_port, dir_,
                                       timers_ != nullptr ? timers_->path() : std::string(),
                                       hooks);
  spdlog::info("attempt {}: starting {} workers (ranks {}..{} of {}), MASTER_ADDR={} "
               "MASTER_PORT={}", round_.id, r.local_world_size, r.base_rank,
               r.base_rank + r.local_world_size - 1, r.world_size, round_.master_addr,
               *master_port);
  const int round = round_.id;
  if (config_.warm_standby && config_.is_static() &&
      round_.restart_count >= config_.max_restarts) {
    ctx_.runner->keep_standbys({});  // the last attempt: no later standby would be used
  }
  try {
    // The runner may report a straggler after this attempt is over: the exit goes to the
    // agent's queue (which outlives the attempt), tagged with its round.
    auto pids = ctx_.runner->start(launches, [&events = events_, round](const WorkerExit& exit) {
      AgentEvent e;
      e.kind = AgentEvent::Kind::kWorkerExited;
      e.round = round;
      e.exit = exit;
      events.push(e);
    });
    workers_.started(pids);
    emit_("workers_started", {{"attempt", round}, {"pids", pids}, {"master_port", *master_port}});
  } catch (const CannotStartError& e) {
    spdlog::error("{}", e.what());
    auto decided = publish(failure(Failure::Kind::kAgent, e.exit_code(), e.what()));
    ctx_.runner->stop(SIGKILL, 0s);  // the ranks that did start
    return decided;
  } catch (const Error& e) {
    auto decided = publish(failure(Failure::Kind::kAgent, kExitCannotStart, e.what()));
    ctx_.runner->stop(SIGKILL, 0s);  // the ranks that did start
    return decided;
  }
  return std::nullopt;
}

std::optional<AttemptOutcome> Attempt::handle(const AgentEvent& event) {
  // Signals are for whatever round runs, timers for whichever worker has the pid; everything
  // else belongs to one round.
  if (event.kind == AgentEvent::Kind::kSignal) return on_signal(event.signal);
  if (event.kind == AgentEvent::Kind::kTimerExpired) return on_timer_expired(event);
  if (event.round != round_.id) return std::nullopt;
  switch (event.kind) {
    case AgentEvent::Kind::kWorkerExited:
      return on_worker_exited(event.exit);
    case AgentEvent::Kind::kOutcome:
      return on_outcome(event.text);
    case AgentEvent::Kind::kStoreLost:
      return on_store_lost(event.text);
    case AgentEvent::Kind::kNodeLost:
      return on_node_lost(event.node);
    case AgentEvent::Kind::kProgress:
      hang_.on_progress(workers_);
      return std::nullopt;
    case AgentEvent::Kind::kSignal:
    case AgentEvent::Kind::kTimerExpired:
      break;
  }
  return std::nullopt;
}

Failure Attempt::record_worker_failure(const WorkerExit& exit) {
  auto f = worker_failure(exit, dir_.error_file(exit.local_rank), ctx_.host,
                          round_.ranks.group_rank, round_.restart_count);
  channel_.record_failure(f);
  workers_.record_failure(exit.local_rank, f);
  return f;
}

std::optional<AttemptOutcome> Attempt::on_worker_exited(const WorkerExit& exit) {
  workers_.count_exit(exit);
  emit_("worker_exited",
        {{"attempt", round_.id}, {"rank", exit.rank}, {"local_rank", exit.local_rank},
         {"pid", exit.pid}, {"exit_code", exit.exit_code}, {"signal", exit.signal},
         {"exit_mono", std::chrono::duration<double>(exit.when.time_since_epoch()).count()}});
  if (exit.succeeded()) {
    spdlog::debug("rank {} (local {}) exited 0", exit.rank, exit.local_rank);
    if (workers_.running == 0 && !published_) {
      published_ = true;
      // The last node to succeed decides the round; the others learn it from the watcher.
      if (auto decided = channel_.report_success()) return decide(*decided);
      // The agent serving the store stays until the others are done: leaving would take the
      // store away from nodes that are still training.
      if (!ctx_.hosts_store) barrier_ = Deadline::after(config_.exit_barrier_timeout);
      barrier_progress_.emplace(config_.progress_interval);
      // A node whose workers are done makes no more progress: for --hang-timeout it is idle.
      if (auto hang = hang_.workers_done(workers_)) return publish(*hang);
    }
    return std::nullopt;
  }
  spdlog::error("rank {} (local rank {}, pid {}) on {} {}", exit.rank, exit.local_rank, exit.pid,
                ctx_.host,
                exit.signal ? "was " + killed_by(exit.signal, exit.out_of_memory)
                            : fmt::format("exited with code {}", exit.exit_code));
  auto f = record_worker_failure(exit);
  if (published_) return std::nullopt;
  published_ = true;
  return publish(f);
}

std::optional<AttemptOutcome> Attempt::on_outcome(const std::string& value) {
  return decide(value);
}

std::optional<AttemptOutcome> Attempt::on_signal(int signal) {
  spdlog::warn("received {}: stopping workers", signal_name(signal));
  announce_stop(ctx_, round_, signal);
  auto f = failure(Failure::Kind::kSignal, 128 + signal,
                   fmt::format("the agent on {} received {}", ctx_.host, signal_name(signal)));
  f.signal = signal;
  return AttemptOutcome::failed(f);
}

std::optional<AttemptOutcome> Attempt::on_store_lost(const std::string& message) {
  return AttemptOutcome::failed(
      failure(Failure::Kind::kAgent, kExitRendezvous, "lost the rendezvous store: " + message),
      true);
}

std::optional<AttemptOutcome> Attempt::on_node_lost(int group_rank) {
  // Elastic: the others re-form without it. Static: the node count is fixed, so the job cannot
  // go on; every node stops now instead of hanging in a collective.
  auto f = failure(ctx_.rendezvous->can_reform() ? Failure::Kind::kMembership
                                                 : Failure::Kind::kAgent,
                   kExitRendezvous,
                   fmt::format("node {} ({}) stopped sending heartbeats", group_rank,
                               round_.host_of(group_rank)));
  f.lost_node = group_rank;
  return publish(f);
}

void Attempt::barrier_progress() {
  std::vector<std::string> running;
  try {
    for (int g : channel_.nodes_still_running()) {
      running.push_back(round_.host_of(g) == "?" ? fmt::format("node {}", g)
                                                 : fmt::format("node {} ({})", g, round_.host_of(g)));
    }
  } catch (const Error& e) {
    spdlog::warn("exit barrier: cannot ask which nodes still run: {}", e.what());
    return;
  }
  const auto waited = barrier_ ? barrier_progress_->elapsed_of(config_.exit_barrier_timeout)
                               : fmt::format("{}s", std::chrono::duration_cast<std::chrono::seconds>(
                                                        barrier_progress_->elapsed())
                                                        .count());
  spdlog::info("exit barrier: this node's workers are done; waiting for {} still running; {}",
               fmt::join(running, ", "), waited);
}

std::optional<AttemptOutcome> Attempt::on_barrier_expired() {
  spdlog::warn("exit barrier: other nodes still running after {}; leaving with success",
               format_duration(config_.exit_barrier_timeout));
  keep_alive_.reset();
  ctx_.rendezvous->leave_early(round_);
  auto outcome = AttemptOutcome::succeeded();
  outcome.left_early = true;
  return outcome;
}

// Forwards the signal that stopped us, else SIGTERM; SIGKILL after the shutdown timeout.
void Attempt::stop_workers() {
  const int stop_signal = signal_ != 0 ? signal_.load() : SIGTERM;
  if (workers_.running > 0) {
    spdlog::info("stopping {} local worker(s) with {}", workers_.running,
                 signal_name(stop_signal));
  }
  // A worker that wrote its error file is failing on its own: let it end with its own code.
  std::vector<int> failing;
  for (int local = 0; local < round_.ranks.local_world_size; ++local) {
    if (fs::exists(dir_.error_file(local))) failing.push_back(local);
  }
  // One that cannot be reaped (stuck in the kernel) is named by the runner and left behind:
  // the job restarts without it, as it would once it ended.
  const auto unreaped = ctx_.runner->stop(stop_signal, config_.shutdown_timeout, failing);
  auto stopped = nlohmann::json{{"attempt", round_.id}};
  for (const auto& u : unreaped) {
    stopped["unreaped"].push_back({{"rank", u.rank}, {"pid", u.pid}, {"state", u.whereabouts}});
  }
  emit_("workers_stopped", std::move(stopped));
  collect_late_failures(stop_signal);
}

// Workers that failed on their own while the round was stopping are candidates for the root
// cause too; the ones our own signal ended are not.
void Attempt::collect_late_failures(int stop_signal) {
  while (auto late = events_.pop(Deadline::after(0s))) {
    if (late->kind == AgentEvent::Kind::kSignal) {
      events_.push(*late);  // still to be acted on by the caller
      break;
    }
    if (late->kind != AgentEvent::Kind::kWorkerExited || late->round != round_.id) continue;
    const auto& exit = late->exit;
    if (exit.succeeded()) continue;
    // One that our signal ended counts only if it had already failed on its own (it wrote its
    // error file): it may have been busy exiting when the stop came.
    const bool stopped_by_us = exit.signal == stop_signal || exit.signal == SIGKILL;
    if (stopped_by_us && !fs::exists(dir_.error_file(exit.local_rank))) continue;
    // When this agent was signalled, the signal is the job's end, not a failure that ended as
    // its workers were stopped: the round's list in the store, which may be going away with
    // the other agents, is left alone.
    if (signal_ != 0) continue;
    record_worker_failure(exit);
  }
}

// A FileTimer expired: the worker's own promise ("this block ends within N seconds") was
// broken, so it is that rank's hang. torchrun sends the worker the timer's signal; the agent
// takes the stacks first and then stops the whole job as for any failure.
std::optional<AttemptOutcome> Attempt::on_timer_expired(const AgentEvent& event) {
  auto hang = hang_.timer_expired(event, workers_);
  if (!hang || published_) return std::nullopt;
  published_ = true;
  return publish(*hang);
}

// Worker exits while the peers get their grace: each is recorded as a failure of its own (as
// a late one would be); anything else waits for the caller.
void Attempt::wait_for_peers(Deadline deadline) {
  std::vector<AgentEvent> later;
  while (workers_.running > 0) {
    auto event = events_.pop(deadline);
    if (!event) break;
    if (event->kind != AgentEvent::Kind::kWorkerExited || event->round != round_.id) {
      const bool stop = event->kind == AgentEvent::Kind::kSignal;
      later.push_back(std::move(*event));
      if (stop) break;
      continue;
    }
    workers_.count_exit(event->exit);
    if (!event->exit.succeeded()) record_worker_failure(event->exit);
  }
  for (auto& e : later) events_.push(std::move(e));
}

bool Attempt::takes_stacks(const Failure& decided) const {
  if (decided.kind == Failure::Kind::kHang) return true;
  if (decided.kind != Failure::Kind::kWorker) return false;
  // A collective's timeout, by default: the rank that failed only waited for a peer, which the
  // stacks can name. Any failure with --hang-timeout. An ordinary crash does not wait for them.
  return config_.hang_timeout.count() > 0 ||
         mentions_collective_timeout(decided.message + "\n" + decided.traceback + "\n" +
                                     fmt::format("{}", fmt::join(decided.stderr_tail, "\n")));
}

void Attempt::take_stacks(const Failure& decided) {
  if (!takes_stacks(decided) || workers_.pids.empty() || signal_ != 0) return;
  if (decided.kind == Failure::Kind::kWorker) wait_for_peers(Deadline::after(kPeerGrace));
  if (signal_ != 0) return;  // stopping now matters more than the stacks

  const auto started = Clock::now();
  const auto where = ddprun::take_stacks(*ctx_.runner, workers_, dir_, round_, ctx_.host,
                                         Deadline::after(kCaptureBudget));
  emit_("stacks", {{"attempt", round_.id},
                   {"seconds", std::chrono::duration<double>(Clock::now() - started).count()},
                   {"ranks", where_json(where)}});
  channel_.record_where(where);
}

void announce_stop(AgentContext& ctx, const Round& round, int sig) {
  const bool reform = ctx.rendezvous->can_reform();
  if (round.ranks.group_world_size < 2 && !reform) return;
  auto f = agent_failure(ctx.host, round.ranks.group_rank, round.restart_count,
                         reform ? Failure::Kind::kMembership : Failure::Kind::kSignal, 128 + sig,
                         reform ? fmt::format("node {} left ({})", ctx.host, signal_name(sig))
                                : fmt::format("the agent on {} received {}", ctx.host,
                                              signal_name(sig)));
  f.signal = sig;
  announce_leaving(ctx, round, f, signal_name(sig));
}

void announce_leaving(AgentContext& ctx, const Round& round, const Failure& f,
                      const std::string& what) {
  // Each step's own deadline, short: a node that stops does not wait long for the store.
  constexpr auto kStep = 2s;
  std::unique_ptr<store::Store> store;
  bool decided = false;
  try {
    store = ctx.open_store(Deadline::after(kStep));
    const auto mine = f.to_json();
    decided = RoundChannel(*store, round, kStep).publish_outcome(mine) == mine;
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes about {}: {}", what, e.what());
    return;
  }
  try {
    // This node may be group rank 0, leaving before it published the workers' port: the
    // round is decided, so the others need not wait for it.
    RoundChannel(*store, round, kStep).withdraw_master_port();
    // Only a round that re-forms because this node leaves goes on without it. Another
    // outcome may keep the same members, whose ring must then find this node gone.
    if (decided && f.kind == Failure::Kind::kMembership) {
      ctx.rendezvous->leave_round(round, *store, Deadline::after(kStep));
    }
  } catch (const std::exception& e) {
    spdlog::warn("told the other nodes about {}, but could not end their wait for this node: {}",
                 what, e.what());
  }
}

}  // namespace ddprun
