#include "agent/agent.hpp"

#include "agent/worker_launch.hpp"

#include <signal.h>

#include <filesystem>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/failure.hpp"
#include "agent/node_check.hpp"
#include "agent/round_channel.hpp"
#include "agent/status_board.hpp"
#include "agent/worker_launch.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"

namespace ddprun {

using namespace std::chrono_literals;

Agent::Agent(const LaunchConfig& config, AgentContext context)
    : config_(config), ctx_(std::move(context)) {
  ctx_.rendezvous->set_event_sink(
      [this](const std::string& name, nlohmann::json fields) { emit(name, std::move(fields)); });
}

Agent::~Agent() {
  ctx_.rendezvous->set_event_sink(nullptr);
  // The runner's exit callback points into this agent: no worker may outlive it.
  try {
    ctx_.runner->stop(SIGKILL, 0s);
  } catch (const std::exception& e) {
    spdlog::error("stopping workers: {}", e.what());
  }
}

void Agent::emit(const std::string& name, nlohmann::json fields) {
  if (ctx_.status != nullptr) ctx_.status->on_event(name, fields);
  if (!ctx_.events) return;
  // A node has no group rank before its first round.
  fields["node"] = round_ ? nlohmann::json(round_->ranks.group_rank) : nlohmann::json();
  ctx_.events->write(name, std::move(fields));
}

void Agent::on_signal(int signal) {
  int expected = 0;
  if (!signal_.compare_exchange_strong(expected, signal)) {
    spdlog::warn("received {} again: already stopping on {} (the workers have up to {}, "
                 "--shutdown-timeout, before SIGKILL)",
                 signal_name(signal), signal_name(expected),
                 format_duration(config_.shutdown_timeout));
    return;
  }
  AgentEvent e;
  e.kind = AgentEvent::Kind::kSignal;
  e.signal = signal;
  events_.push(e);
  // A rendezvous or barrier may be blocking this agent's thread in the store: end it.
  ctx_.store->interrupt();
  side_.interrupt();
}

RunResult Agent::result(RunResult::End end, std::string reason) const {
  RunResult r;
  r.end = end;
  r.restarts = restarts_;
  r.reason = std::move(reason);
  r.host = ctx_.host;
  r.max_restarts = config_.max_restarts;
  r.membership_changes = membership_changes_;
  r.attempts = attempts_;
  r.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  if (round_) {
    r.world_size = round_->ranks.world_size;
    r.group_rank = round_->ranks.group_rank;
  }
  return r;
}

RunResult Agent::run() {
  RunResult r;
  try {
    start_file_timer();
    if (config_.warm_standby) {
      ctx_.runner->keep_standbys(
          standby_templates(config_, ctx_, timers_ != nullptr ? timers_->path() : std::string()));
    }
    return run_rounds();
  } catch (const InterruptedError&) {
    // A signal ended a store call: forward it to any workers, with the usual grace, before
    // this agent waits on the store again (the one serving it waits for every goodbye).
    const int sig = signal_.load();
    r = result(RunResult::End::kStopped, fmt::format("stopped by {}", signal_name(sig)));
    r.signal = sig;
    if (round_) announce_stop(ctx_, *round_, sig);
    stop_workers(sig, config_.shutdown_timeout);
    // Say goodbye too, so that the agent serving the store does not wait for this one.
    if (round_) say_goodbye(-1);
    return r;
  } catch (const std::exception& e) {
    // Usage errors are found before an agent runs; one here is as unexpected as a bug.
    r = classify(e) == ErrorClass::kRendezvous
            ? result(RunResult::End::kRendezvousFailed, e.what())
            : result(RunResult::End::kInternalError, std::string("internal error: ") + e.what());
  }
  stop_workers(SIGKILL, Clock::duration::zero());
  return r;
}

void Agent::stop_workers(int signal, Clock::duration grace) {
  try {
    ctx_.runner->stop(signal, grace);
  } catch (const std::exception& e) {
    spdlog::error("stopping workers: {}", e.what());
  }
}

// torchrun's FileTimer server, when the job asks for it as torchrun's does.
void Agent::start_file_timer() {
  if (env_value(ctx_.base_env, "TORCHELASTIC_ENABLE_FILE_TIMER") != "1") return;
  auto path = env_value(ctx_.base_env, "TORCHELASTIC_TIMER_FILE");
  if (path.empty()) {
    if (ctx_.log_dir.empty()) throw Error("FileTimer: no log directory to make its FIFO in");
    path = (std::filesystem::path(ctx_.log_dir) / "timer.fifo").string();
  }
  timers_ = std::make_unique<FileTimerServer>(path, events_, [this](int) { progress_.note(); });
  spdlog::info("serving FileTimer requests at {}", path);
}

RunResult Agent::run_rounds() {
  auto& rdzv = *ctx_.rendezvous;
  if (config_.node_check != NodeCheck::kOff) {
    if (const auto first = rdzv.closed_first_round()) {
      node_checked_ = true;
      // A member publishes its report within its look's deadline of the round's close; this
      // node's own look counts against the same deadline, which starts later.
      const auto reports_by =
          Deadline::after(config_.rdzv_conf.read_timeout + kNodeProbeTimeout);
      if (auto end = check_late_node(*first, reports_by)) return std::move(*end);
    }
  }
  while (true) {
    auto next = rdzv.next_round(restarts_);
    if (!next.round) return finished_without_this_node(next.job_outcome);
    round_ = std::move(next.round);
    const auto carried_port = std::exchange(next_master_port_, std::nullopt);
    if (round_->ranks_kept) round_->master_port = carried_port;
    restarts_ = round_->restart_count;
    if (ctx_.status != nullptr) ctx_.status->on_round(*round_);
    if (config_.node_check != NodeCheck::kOff && !node_checked_) {
      node_checked_ = true;
      // Every member of the job's first round checks. A node that comes later looks at itself
      // before it joins (above), or, when it found the first round still open, once it is a
      // member of a later round.
      if (round_->id == 0) {
        auto checked = check_nodes();
        if (checked.end) return std::move(*checked.end);
        if (checked.reform) {
          ++membership_changes_;
          rdzv.round_ended(*round_, RoundEnd{});
          continue;
        }
      } else if (auto end = check_joined_late()) {
        return std::move(*end);
      }
    }
    const auto started = Clock::now();
    const auto outcome =
        Attempt(config_, ctx_, *round_, events_, signal_, side_,
                [this](const std::string& name, nlohmann::json fields) {
                  emit(name, std::move(fields));
                },
                progress_, timers_.get())
            .run();
    attempts_.push_back(AttemptRecord{
        round_->id, round_->restart_count, round_->ranks, how_it_ended(outcome),
        std::chrono::duration<double>(Clock::now() - started).count()});
    if (outcome.success) return finish_success(outcome.left_early);
    const auto& f = outcome.failure;
    if (f.kind == Failure::Kind::kMembership) {
      ++membership_changes_;
      spdlog::warn("round {} ends: {}; re-forming without spending a restart", round_->id,
                   f.message);
    } else if (restarts_after(f, restarts_, config_.max_restarts, signal_)) {
      log_restart(f);
      ++restarts_;
      emit("restart", {{"attempt", restarts_}, {"round", round_->id + 1}});
    } else {
      return finish_failure(f, outcome.store_lost);
    }
    next_master_port_ = outcome.end.next_master_port;
    rdzv.round_ended(*round_, outcome.end);
  }
}

std::string Agent::how_it_ended(const AttemptOutcome& outcome) {
  if (outcome.success) return "succeeded";
  const auto& f = outcome.failure;
  switch (f.kind) {
    case Failure::Kind::kWorker:
      return fmt::format("failed: rank {} on {} {}", f.rank, f.host,
                         f.signal ? killed_by(f.signal, f.out_of_memory)
                                  : fmt::format("exited with {}", f.exit_code));
    case Failure::Kind::kMembership:
      return "re-formed: " + f.message;
    case Failure::Kind::kHang:
      return "hung: " + f.message;
    case Failure::Kind::kSignal:
    case Failure::Kind::kAgent:
      return "stopped: " + f.message;
  }
  return "ended";
}

// A spare, or a node that came after the end: the job's outcome was decided without it.
RunResult Agent::finished_without_this_node(const std::string& outcome) const {
  if (outcome == kRoundSucceeded) {
    return result(RunResult::End::kSucceeded, "the job finished without this node");
  }
  auto f = Failure::from_json(outcome);
  auto r = result(RunResult::End::kFailed,
                  "the job failed without this node: " +
                      (f.kind == Failure::Kind::kWorker
                           ? fmt::format("rank {} on {} exited with code {}", f.rank, f.host,
                                         f.exit_code)
                           : f.message));
  r.root_cause = std::move(f);
  return r;
}

RunResult Agent::finish_success(bool left_early) {
  ctx_.rendezvous->job_ended();
  if (!left_early) ctx_.rendezvous->record_job_end("succeeded", end_record_deadline());
  say_goodbye(-1);
  return result(RunResult::End::kSucceeded,
                fmt::format("all {} workers succeeded", round_->ranks.world_size));
}

RunResult Agent::finish_failure(const Failure& f, bool store_lost) {
  ctx_.rendezvous->job_ended();
  // Only a failure that a restart would have answered ends every node; this node's own end (a
  // signal, its store lost) leaves an elastic job going on without it.
  if (restartable(f) && !store_lost && signal_ == 0 && !attempts_.empty()) {
    ctx_.rendezvous->record_job_end(attempts_.back().ended, end_record_deadline());
  }
  // With the store gone there is nobody to say goodbye to.
  if (!store_lost) say_goodbye(f.lost_node);
  auto r = result(RunResult::End::kFailed,
                  f.kind == Failure::Kind::kWorker
                      ? fmt::format("rank {} on {} failed with exit code {}", f.rank, f.host,
                                    f.exit_code)
                      : f.message);
  r.root_cause = f;
  return r;
}

// The job's end is recorded before the goodbye, within no more than the goodbye's own wait: a
// store that vanished without a word holds up neither for longer than the other.
Deadline Agent::end_record_deadline() const {
  return Deadline::after(std::min(config_.rdzv_conf.read_timeout, config_.rdzv_conf.close_timeout));
}

void Agent::log_restart(const Failure& f) const {
  const auto what = f.kind == Failure::Kind::kWorker
                        ? fmt::format("rank {} on {}: exit code {}", f.rank, f.host, f.exit_code)
                        : f.message;
  spdlog::warn("attempt {} failed ({}); restarting all workers ({} of {} restarts left)",
               round_->id, what, config_.max_restarts - restarts_ - 1, config_.max_restarts);
}

// The end of the job: this node says goodbye, and the node serving the store waits (bounded)
// until every node has, before the store goes away. A signal interrupts this agent's own
// connection, before the goodbye or during it, so the goodbye then goes through a fresh one:
// without it the node serving the store would wait its whole close timeout for this node.
void Agent::say_goodbye(int lost_node) {
  const auto deadline = Deadline::after(config_.rdzv_conf.close_timeout);
  const auto channel = [&](store::Store& store) {
    return RoundChannel(store, *round_, config_.rdzv_conf.read_timeout);
  };
  try {
    store::Store* store = ctx_.store;
    std::unique_ptr<store::Store> fresh;
    bool left = false;
    if (signal_ == 0) {
      try {
        channel(*store).leave(deadline);
        left = true;
      } catch (const InterruptedError&) {
      }
    }
    if (!left) {
      fresh = ctx_.open_store(deadline.min(Deadline::after(5s)));
      store = fresh.get();
      channel(*store).leave(deadline);
    }
    if (ctx_.hosts_store) channel(*store).wait_for_goodbyes(lost_node, deadline);
  } catch (const Error& e) {
    spdlog::warn("leaving the rendezvous: {}", e.what());
  }
}

}  // namespace ddprun
