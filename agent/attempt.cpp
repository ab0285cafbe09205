#include "agent/attempt.hpp"

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "agent/failure.hpp"
#include "agent/file_timer.hpp"
#include "agent/stack_report.hpp"
#include "agent/status_board.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"

namespace ddprun {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

void replace_all(std::string& s, const std::string& token, const std::string& value) {
  for (auto pos = s.find(token); pos != std::string::npos; pos = s.find(token, pos + value.size())) {
    s.replace(pos, token.size(), value);
  }
}

bool has(Std streams, Std bit) {
  return (static_cast<int>(streams) & static_cast<int>(bit)) != 0;
}

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

std::string render_prefix(const std::string& tmpl, int rank, int local_rank, int node,
                          const std::string& host, const std::string& role) {
  std::string out = tmpl;
  replace_all(out, "{rank}", std::to_string(rank));
  replace_all(out, "{local_rank}", std::to_string(local_rank));
  replace_all(out, "{node}", std::to_string(node));
  replace_all(out, "{host}", host);
  replace_all(out, "{role}", role);
  return out;
}

void SideConnection::interrupt() {
  std::lock_guard lock(mutex_);
  interrupted_ = true;
  if (in_use_ != nullptr) in_use_->interrupt();
}

SideConnection::Use::Use(SideConnection& side, store::Store& store) : side_(side) {
  std::lock_guard lock(side.mutex_);
  side.in_use_ = &store;
  if (side.interrupted_) store.interrupt();
}

SideConnection::Use::~Use() {
  std::lock_guard lock(side_.mutex_);
  side_.in_use_ = nullptr;
}

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
      dir_((fs::path(ctx.log_dir) / fmt::format("attempt_{}", round.id)).string()) {}

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

std::string Attempt::error_file(int local_rank) const {
  return (fs::path(dir_) / std::to_string(local_rank) / "error.json").string();
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
  if (timers_ != nullptr) timers_->forget(pids_);
  if (settles) {
    // Stacks are taken after a hang, or after any failure with --hang-timeout (the same on
    // every node: the settings are compared at the rendezvous). Without them there is no
    // node's `where` record to read, and reading them would cost the chooser a request per node.
    const bool stacks = outcome.failure.kind == Failure::Kind::kHang ||
                        config_.hang_timeout.count() > 0;
    std::function<void(Failure&)> refine;
    if (stacks) refine = [this](Failure& f) { explain(f); };
    const auto offered = offer_next_master_port();
    // The watcher's connection, idle now, carries this node's arrival with the next round's
    // outcome watch behind it (a store that cannot pipeline leaves the arrival on the agent's
    // own); a signal interrupts it as it does the agent's own.
    std::optional<SideConnection::Use> side;
    if (const auto next = ctx_.rendezvous->next_prefix(round_);
        ctx_.spare_watch_store && !next.empty() &&
        ctx_.spare_watch_store->pipeline_get(RoundChannel::outcome_key(next),
                                             Deadline::after(OutcomeWatcher::kWaitBound))) {
      side.emplace(side_, *ctx_.spare_watch_store);
      channel_.arrive_on(*ctx_.spare_watch_store);
    }
    // The chooser closes the next round ahead when the job restarts from its pick (as the
    // agent will decide: Agent::run_rounds).
    const auto settle = [this](const Failure& root) -> std::optional<std::string> {
      if (!restarts_after(root, round_.restart_count, config_.max_restarts, signal_)) {
        return std::nullopt;
      }
      return ctx_.rendezvous->settle_next_round(round_, round_.restart_count + 1);
    };
    auto cause = channel_.resolve_root_cause(outcome.failure, outcome_mine_,
                                             config_.shutdown_timeout + kCaptureBudget + 10s,
                                             refine, settle);
    outcome.failure = std::move(cause.failure);
    outcome.end = RoundEnd{cause.all_stopped, outcome_mine_, std::move(cause.next_round)};
    outcome.next_master_port = offered ? offered : cause.next_master_port;
  }
  return outcome;
}

// Group rank 0 picks the next round's master port now, before it settles, so that the root
// cause carries it to every node: when the next round keeps every node's ranks (a static job,
// an elastic round of the same members) group rank 0 is the same node, and no node reads the
// port on the restart's path. It publishes the same port then, for a node that missed the root
// cause; a round with other ranks picks a port of its own. The port is free when picked and
// held by nobody until the workers bind it, as any port picked ahead is (torchrun's too), only
// for longer: a rank 0 that cannot bind it fails that attempt, as one would before.
std::optional<int> Attempt::offer_next_master_port() {
  if (round_.ranks.group_rank != 0) return std::nullopt;
  int port = 0;
  try {
    port = ctx_.reserve_master_port(round_.master_addr);
  } catch (const Error& e) {
    spdlog::warn("could not reserve the next round's master port: {}", e.what());
    return std::nullopt;
  }
  // Kept even when the offer fails: it may have reached the store and the root cause, and this
  // node publishes it in the next round for whoever did not get it there.
  try {
    channel_.offer_next_master_port(port);
  } catch (const Error& e) {
    spdlog::warn("could not offer the next round's master port: {}", e.what());
  }
  return port;
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
    const auto hang_due = hang_check_due();
    if (hang_due) wait = wait.min(*hang_due);
    auto event = events_.pop(wait);
    if (event) {
      outcome = handle(*event);
    } else if (hang_due && hang_due->expired()) {
      outcome = check_hang();
    } else if (barrier_ && barrier_->expired()) {
      outcome = on_barrier_expired();
    } else if (barrier_progress_ && barrier_progress_->due()) {
      barrier_progress();
    }
  }
  return *outcome;
}

// Group rank 0 publishes the port right after the rendezvous; if it has not within the
// keep-alive deadline it is gone, and waiting longer would only hang. A port the round already
// carries (offer_next_master_port) is not read again.
std::optional<int> Attempt::agree_master_port(AttemptOutcome& failed) {
  if (round_.ranks.group_rank == 0) {
    channel_.publish_master_port(round_.master_port ? *round_.master_port
                                                    : ctx_.reserve_master_port(round_.master_addr));
  }
  if (round_.master_port) return round_.master_port;
  const auto& conf = config_.rdzv_conf;
  const auto wait = conf.keep_alive_interval * std::max(1, conf.keep_alive_max_attempt) + 5s;
  try {
    return channel_.master_port(Deadline::after(wait));
  } catch (const TimeoutError&) {
    auto f = failure(ctx_.rendezvous->can_reform() ? Failure::Kind::kMembership
                                                   : Failure::Kind::kAgent,
                     kExitRendezvous,
                     fmt::format("node 0 ({}) did not publish the workers' master port within {}",
                                 round_.host_of(0), format_duration(wait)));
    f.lost_node = 0;
    failed = publish(f);
    return std::nullopt;
  }
}

std::optional<AttemptOutcome> Attempt::start_workers() {
  AttemptOutcome failed;
  const auto master_port = agree_master_port(failed);
  if (!master_port) return failed;
  const auto& r = round_.ranks;
  auto launches = make_launches(*master_port);
  spdlog::info("attempt {}: starting {} workers (ranks {}..{} of {}), MASTER_ADDR={} "
               "MASTER_PORT={}", round_.id, r.local_world_size, r.base_rank,
               r.base_rank + r.local_world_size - 1, r.world_size, round_.master_addr,
               *master_port);
  const int round = round_.id;
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
    running_ = r.local_world_size;
    pids_ = pids;
    exited_.assign(pids.size(), false);
    failed_.assign(pids.size(), std::nullopt);
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

std::vector<WorkerLaunch> Attempt::make_launches(int master_port) {
  const auto& r = round_.ranks;
  progress_.restart(round_.id);
  std::vector<WorkerLaunch> launches;
  for (int local = 0; local < r.local_world_size; ++local) {
    auto dir = fs::path(dir_) / std::to_string(local);
    fs::create_directories(dir);
    WorkerEnvInput in;
    in.ranks = r;
    in.local_rank = local;
    in.role = config_.role;
    in.master_addr = round_.master_addr;
    in.master_port = master_port;
    in.restart_count = round_.restart_count;
    in.max_restarts = config_.max_restarts;
    in.run_id = config_.rdzv_id;
    in.error_file = error_file(local);
    in.set_omp_threads = r.local_world_size > 1;
    if (timers_ != nullptr) in.timer_file = timers_->path();
    in.flight_recorder_prefix = (dir / "nccl_trace_rank_").string();
    in.virtual_local_rank = config_.virtual_local_rank;
    in.mpi_env = config_.mpi_env;
    fs::remove(in.error_file);

    WorkerLaunch w;
    w.local_rank = local;
    w.rank = r.global_rank(local);
    w.argv = substitute_local_rank(config_.argv, local);
    w.env = to_env_strings(build_worker_env(ctx_.base_env, in));
    if (local < static_cast<int>(ctx_.placements.size())) w.placement = ctx_.placements[local];
    const auto redirect = config_.redirects.for_rank(local);
    const auto tee = config_.tee.for_rank(local);
    const bool shown = !config_.local_ranks_filter ||
                       std::count(config_.local_ranks_filter->begin(),
                                  config_.local_ranks_filter->end(), local) > 0;
    auto& o = w.output;
    o.stdout_to_console = shown && (!has(redirect, Std::kOut) || has(tee, Std::kOut));
    o.stderr_to_console = shown && (!has(redirect, Std::kErr) || has(tee, Std::kErr));
    if (has(redirect, Std::kOut) || has(tee, Std::kOut)) o.stdout_file = (dir / "stdout.log").string();
    if (has(redirect, Std::kErr) || has(tee, Std::kErr)) o.stderr_file = (dir / "stderr.log").string();
    o.prefix = render_prefix(config_.log_line_prefix, w.rank, local, r.group_rank, ctx_.host,
                             config_.role);
    o.raw = config_.raw_output;
    if (config_.hang_timeout.count() > 0) o.on_output = progress_.sink();
    if (ctx_.status != nullptr) o.on_line = ctx_.status->line_hook(local);
    launches.push_back(std::move(w));
  }
  return launches;
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
      return on_progress();
    case AgentEvent::Kind::kSignal:
    case AgentEvent::Kind::kTimerExpired:
      break;
  }
  return std::nullopt;
}

void Attempt::count_exit(const WorkerExit& exit) {
  --running_;
  if (exit.local_rank >= 0 && exit.local_rank < static_cast<int>(exited_.size())) {
    exited_[exit.local_rank] = true;
  }
}

Failure Attempt::record_worker_failure(const WorkerExit& exit) {
  auto f = worker_failure(exit, error_file(exit.local_rank), ctx_.host, round_.ranks.group_rank,
                          round_.restart_count);
  channel_.record_failure(f);
  if (exit.local_rank >= 0 && exit.local_rank < static_cast<int>(failed_.size())) {
    failed_[exit.local_rank] = f;
  }
  return f;
}

std::optional<AttemptOutcome> Attempt::on_worker_exited(const WorkerExit& exit) {
  count_exit(exit);
  emit_("worker_exited",
        {{"attempt", round_.id}, {"rank", exit.rank}, {"local_rank", exit.local_rank},
         {"pid", exit.pid}, {"exit_code", exit.exit_code}, {"signal", exit.signal},
         {"exit_mono", std::chrono::duration<double>(exit.when.time_since_epoch()).count()}});
  if (exit.succeeded()) {
    spdlog::debug("rank {} (local {}) exited 0", exit.rank, exit.local_rank);
    if (running_ == 0 && !published_) {
      published_ = true;
      // The last node to succeed decides the round; the others learn it from the watcher.
      if (auto decided = channel_.report_success()) return decide(*decided);
      // The agent serving the store stays until the others are done: leaving would take the
      // store away from nodes that are still training.
      if (!ctx_.hosts_store) barrier_ = Deadline::after(config_.exit_barrier_timeout);
      barrier_progress_.emplace(config_.progress_interval);
      // A node whose workers are done makes no more progress: for --hang-timeout it is idle.
      if (config_.hang_timeout.count() > 0 && !idle_voted_) return vote_idle(Clock::now());
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
  return AttemptOutcome::succeeded();
}

// Forwards the signal that stopped us, else SIGTERM; SIGKILL after the shutdown timeout.
void Attempt::stop_workers() {
  const int stop_signal = signal_ != 0 ? signal_.load() : SIGTERM;
  if (running_ > 0) {
    spdlog::info("stopping {} local worker(s) with {}", running_, signal_name(stop_signal));
  }
  // A worker that wrote its error file is failing on its own: let it end with its own code.
  std::vector<int> failing;
  for (int local = 0; local < round_.ranks.local_world_size; ++local) {
    if (fs::exists(error_file(local))) failing.push_back(local);
  }
  ctx_.runner->stop(stop_signal, config_.shutdown_timeout, failing);
  emit_("workers_stopped", {{"attempt", round_.id}});
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
    if (stopped_by_us && !fs::exists(error_file(exit.local_rank))) continue;
    record_worker_failure(exit);
  }
}

// --hang-timeout: the loop wakes when the timeout after the last progress has passed, unless
// this node already said it is idle (the next progress then comes as an event).
std::optional<Deadline> Attempt::hang_check_due() const {
  if (config_.hang_timeout.count() <= 0 || idle_voted_ || running_ == 0) return std::nullopt;
  auto due = progress_.last() + config_.hang_timeout;
  if (vote_retry_ && *vote_retry_ > due) due = *vote_retry_;
  return Deadline::at(due);
}

std::optional<AttemptOutcome> Attempt::check_hang() {
  const auto last = progress_.last();
  if (Clock::now() - last < config_.hang_timeout) return std::nullopt;
  // A worker inside a FileTimer block has said when it will be late: its timer decides that,
  // not the hang timeout. The check comes again one timeout later.
  if (timers_ != nullptr && timers_->pending(pids_)) {
    progress_.note();
    return std::nullopt;
  }
  return vote_idle(last);
}

// The verdict is the job's: each node says when its own workers have been idle for the
// timeout, takes it back when they move, and the node that makes every node idle at once
// declares the hang.
std::optional<AttemptOutcome> Attempt::vote_idle(Clock::time_point last_progress) {
  std::int64_t idle = 0;
  try {
    idle = channel_.vote_idle();
  } catch (const Error& e) {
    spdlog::warn("--hang-timeout: cannot tell the other nodes this node is idle (trying again "
                 "in 1s): {}", e.what());
    vote_retry_ = Clock::now() + 1s;
    return std::nullopt;
  }
  vote_retry_.reset();
  idle_voted_ = true;
  spdlog::debug("--hang-timeout: no progress on this node for {}; {} of {} nodes idle",
                format_duration(Clock::now() - last_progress), idle,
                round_.ranks.group_world_size);
  if (idle >= round_.ranks.group_world_size) {
    const auto seconds = std::chrono::duration_cast<std::chrono::milliseconds>(config_.hang_timeout);
    auto f = failure(Failure::Kind::kHang, kExitHang,
                     fmt::format("no progress from any of {} ranks for {} (--hang-timeout)",
                                 round_.ranks.world_size, format_duration(seconds)));
    spdlog::error("hang: {}", f.message);
    emit_("hang", {{"attempt", round_.id}, {"message", f.message}});
    return publish(f);
  }
  if (running_ > 0 && !progress_.arm(last_progress)) return on_progress();  // it just moved
  return std::nullopt;
}

std::optional<AttemptOutcome> Attempt::on_progress() {
  if (!idle_voted_ || running_ == 0) return std::nullopt;
  try {
    channel_.withdraw_idle();
    idle_voted_ = false;
  } catch (const Error& e) {
    // Still counted as idle: the next progress tries again (voting twice would count this
    // node twice).
    spdlog::warn("--hang-timeout: cannot tell the other nodes this node moved again: {}",
                 e.what());
    progress_.arm(Clock::now());
  }
  return std::nullopt;
}

// A FileTimer expired: the worker's own promise ("this block ends within N seconds") was
// broken, so it is that rank's hang. torchrun sends the worker the timer's signal; the agent
// takes the stacks first and then stops the whole job as for any failure.
std::optional<AttemptOutcome> Attempt::on_timer_expired(const AgentEvent& event) {
  int local = -1;
  for (std::size_t l = 0; l < pids_.size(); ++l) {
    if (pids_[l] == event.pid && !exited_[l]) local = static_cast<int>(l);
  }
  if (local < 0) {
    spdlog::debug("FileTimer '{}' of pid {} expired; not a live worker of attempt {}", event.text,
                  event.pid, round_.id);
    return std::nullopt;
  }
  const int rank = round_.ranks.global_rank(local);
  if (event.timer_signal <= 0) {
    spdlog::warn("rank {}: timer '{}' expired, but it asked for no signal: not stopped",
                 rank, event.text);
    return std::nullopt;
  }
  auto f = failure(Failure::Kind::kHang, kExitHang,
                   fmt::format("rank {}: timer '{}' expired {:.1f}s ago (FileTimer)", rank,
                               event.text, std::max(0.0, unix_seconds() - event.expired_at)));
  f.rank = rank;
  f.local_rank = local;
  f.pid = event.pid;
  spdlog::error("{}", f.message);
  emit_("timer_expired", {{"attempt", round_.id}, {"rank", rank}, {"pid", event.pid},
                          {"scope", event.text}, {"expired_at", event.expired_at}});
  if (published_) return std::nullopt;
  published_ = true;
  return publish(f);
}

// Worker exits while the peers get their grace: each is recorded as a failure of its own (as
// a late one would be); anything else waits for the caller.
void Attempt::wait_for_peers(Deadline deadline) {
  std::vector<AgentEvent> later;
  while (running_ > 0) {
    auto event = events_.pop(deadline);
    if (!event) break;
    if (event->kind != AgentEvent::Kind::kWorkerExited || event->round != round_.id) {
      const bool stop = event->kind == AgentEvent::Kind::kSignal;
      later.push_back(std::move(*event));
      if (stop) break;
      continue;
    }
    count_exit(event->exit);
    if (!event->exit.succeeded()) record_worker_failure(event->exit);
  }
  for (auto& e : later) events_.push(std::move(e));
}

void Attempt::take_stacks(const Failure& decided) {
  const bool hang = decided.kind == Failure::Kind::kHang;
  const bool failure = decided.kind == Failure::Kind::kWorker && config_.hang_timeout.count() > 0;
  if ((!hang && !failure) || pids_.empty() || signal_ != 0) return;
  if (failure) wait_for_peers(Deadline::after(kPeerGrace));
  if (signal_ != 0) return;  // stopping now matters more than the stacks

  std::vector<StackTarget> targets;
  std::vector<int> locals;
  for (std::size_t l = 0; l < pids_.size(); ++l) {
    if (exited_[l]) continue;
    targets.push_back({pids_[l], (fs::path(dir_) / std::to_string(l) / "stacks.txt").string()});
    locals.push_back(static_cast<int>(l));
  }
  std::vector<RankWhere> where;
  const auto started = Clock::now();
  const auto captures = ctx_.runner->capture_stacks(targets, Deadline::after(kCaptureBudget));
  for (std::size_t i = 0; i < captures.size(); ++i) {
    const auto& c = captures[i];
    std::string text;
    if (std::ifstream in(c.file); in) text.assign(std::istreambuf_iterator<char>(in), {});
    RankWhere r = locate(parse_gdb_output(text, c.pid));
    if (!c.ok) r.note = "no stack: " + c.error;
    r.local_rank = locals[i];
    r.rank = round_.ranks.global_rank(locals[i]);
    r.pid = c.pid;
    where.push_back(std::move(r));
  }
  // The ranks of this node that failed on their own: whether their error came from inside a
  // collective tells a blocked peer from one out of step.
  for (std::size_t l = 0; l < failed_.size(); ++l) {
    if (!failed_[l]) continue;
    const auto& f = *failed_[l];
    RankWhere r;
    r.local_rank = static_cast<int>(l);
    r.rank = f.rank;
    r.pid = f.pid;
    r.note = f.signal ? killed_by(f.signal, f.out_of_memory)
                      : fmt::format("exited with code {}", f.exit_code);
    // Its traceback when it wrote one; else its last stderr lines (where Python prints it).
    std::string text = f.traceback;
    if (text.empty()) {
      for (const auto& line : f.stderr_tail) text += line + "\n";
    }
    r.in_collective = mentions_collective(f.message + "\n" + text);
    where.push_back(std::move(r));
  }
  for (auto& r : where) {
    r.host = ctx_.host;
    r.node = round_.ranks.group_rank;
  }
  if (!targets.empty()) {
    spdlog::info("took the stacks of {} live worker(s) in {}: {}/<local rank>/stacks.txt",
                 targets.size(), format_duration(Clock::now() - started), dir_);
  }
  emit_("stacks", {{"attempt", round_.id},
                   {"seconds", std::chrono::duration<double>(Clock::now() - started).count()},
                   {"ranks", where_json(where)}});
  channel_.record_where(where);
}

// The chooser's root cause gets the ranks grouped by where they were. When a worker failed
// and another rank stayed alive outside any collective while the rest failed or waited in one,
// that rank is the cause: the others only timed out waiting for it.
void Attempt::explain(Failure& f) {
  auto where = channel_.all_where();
  // Only when some rank's stack was taken: failures alone are already in the report.
  if (std::none_of(where.begin(), where.end(), [](const RankWhere& r) { return !r.where.empty(); })) {
    return;
  }
  f.where = group_ranks(where, round_.ranks.world_size);
  f.stacks = round_.ranks.group_world_size > 1
                 ? fmt::format("attempt_{}/<local rank>/stacks.txt in each node's log directory "
                               "(this node's: {})", round_.id, dir_)
                 : fmt::format("{}/<local rank>/stacks.txt", dir_);
  const auto out = ranks_out_of_step(where);
  if (out.empty()) return;
  const auto& who = *std::find_if(where.begin(), where.end(),
                                  [&](const RankWhere& r) { return r.rank == out.front(); });
  if (f.kind == Failure::Kind::kWorker) {
    // The first failure's own details go; the message keeps it.
    const auto first = fmt::format("rank {} on {} {}", f.rank, f.host,
                                   f.signal ? killed_by(f.signal, f.out_of_memory)
                                            : fmt::format("exited with code {}", f.exit_code));
    f.kind = Failure::Kind::kHang;
    f.exit_code = kExitHang;
    f.signal = 0;
    f.message = fmt::format("{} {} alive outside any collective ({}) while the other ranks "
                            "failed in one or wait in one; first failure: {}",
                            out.size() == 1 ? "rank" : "ranks", format_rank_list(out),
                            who.where, first);
    f.traceback.clear();
    f.stderr_tail.clear();
  } else if (f.rank < 0) {
    f.message += fmt::format("; out of step: {} {}", out.size() == 1 ? "rank" : "ranks",
                             format_rank_list(out));
  } else {
    return;  // a timer's rank stays the cause
  }
  {
    f.rank = who.rank;
    f.local_rank = who.local_rank;
    f.pid = who.pid;
    f.host = who.host;
    f.node = who.node;
  }
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
  try {
    auto store = ctx.open_store(Deadline::after(2s));
    RoundChannel(*store, round, std::chrono::milliseconds(2000)).publish_outcome(f.to_json());
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes about {}: {}", signal_name(sig), e.what());
  }
}

}  // namespace ddprun
