#include "agent/hang_watch.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/file_timer.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/progress.hpp"

namespace ddprun {

using namespace std::chrono_literals;

HangWatch::HangWatch(const LaunchConfig& config, const Round& round, std::string host,
                     RoundChannel& channel, WorkerProgress& progress, FileTimerServer* timers,
                     RendezvousHandler::EventSink emit)
    : config_(config),
      round_(round),
      host_(std::move(host)),
      channel_(channel),
      progress_(progress),
      timers_(timers),
      emit_(std::move(emit)) {}

Failure HangWatch::hang(const std::string& message) const {
  return agent_failure(host_, round_.ranks.group_rank, round_.restart_count, Failure::Kind::kHang,
                       kExitHang, message);
}

// The loop wakes when the timeout after the last progress has passed, unless this node already
// said it is idle (the next progress then comes as an event).
std::optional<Deadline> HangWatch::due(const LocalWorkers& workers) const {
  if (!enabled() || idle_voted_ || workers.running == 0) return std::nullopt;
  auto due = progress_.last() + config_.hang_timeout;
  if (vote_retry_ && *vote_retry_ > due) due = *vote_retry_;
  return Deadline::at(due);
}

std::optional<Failure> HangWatch::check(const LocalWorkers& workers) {
  const auto last = progress_.last();
  if (Clock::now() - last < config_.hang_timeout) return std::nullopt;
  // A worker inside a FileTimer block has said when it will be late: its timer decides that,
  // not the hang timeout. The check comes again one timeout later.
  if (timers_ != nullptr && timers_->pending(workers.pids)) {
    progress_.note();
    return std::nullopt;
  }
  return vote_idle(last, workers);
}

std::optional<Failure> HangWatch::workers_done(const LocalWorkers& workers) {
  if (!enabled() || idle_voted_) return std::nullopt;
  return vote_idle(Clock::now(), workers);
}

std::optional<Failure> HangWatch::vote_idle(Clock::time_point last_progress,
                                            const LocalWorkers& workers) {
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
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(config_.hang_timeout);
    auto f = hang(fmt::format("no progress from any of {} ranks for {} (--hang-timeout)",
                              round_.ranks.world_size, format_duration(timeout)));
    spdlog::error("hang: {}", f.message);
    emit_("hang", {{"attempt", round_.id}, {"message", f.message}});
    return f;
  }
  // The workers may have moved since `last_progress`: then the vote is taken back at once.
  if (workers.running > 0 && !progress_.arm(last_progress)) on_progress(workers);
  return std::nullopt;
}

void HangWatch::on_progress(const LocalWorkers& workers) {
  if (!idle_voted_ || workers.running == 0) return;
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
}

// The worker's own promise ("this block ends within N seconds") was broken, so it is that
// rank's hang. torchrun sends the worker the timer's signal; the agent takes the stacks first
// and then stops the whole job as for any failure.
std::optional<Failure> HangWatch::timer_expired(const AgentEvent& event,
                                                const LocalWorkers& workers) {
  const int local = workers.live_local_rank(event.pid);
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
  auto f = hang(fmt::format("rank {}: timer '{}' expired {:.1f}s ago (FileTimer)", rank,
                            event.text, std::max(0.0, unix_seconds() - event.expired_at)));
  f.rank = rank;
  f.local_rank = local;
  f.pid = event.pid;
  spdlog::error("{}", f.message);
  emit_("timer_expired", {{"attempt", round_.id}, {"rank", rank}, {"pid", event.pid},
                          {"scope", event.text}, {"expired_at", event.expired_at}});
  return f;
}

}  // namespace ddprun
