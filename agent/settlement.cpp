#include "agent/settlement.hpp"

#include <spdlog/spdlog.h>

#include "agent/failure.hpp"
#include "agent/outcome_watcher.hpp"
#include "common/error.hpp"

namespace ddprun {

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

Settler::Settler(const LaunchConfig& config, AgentContext& ctx, const Round& round,
                 RoundChannel& channel, SideConnection& side, const std::atomic<int>& signal)
    : config_(config), ctx_(ctx), round_(round), channel_(channel), side_(side), signal_(signal) {}

// When the next round keeps every node's ranks (a static job, an elastic round of the same
// members) group rank 0 is the same node, and the workers' store it opens here is the one its
// workers use: listening before the round begins. It publishes the same port in that round
// too, for a node that missed the root cause; a round with other ranks opens a store of its own.
std::optional<int> Settler::offer_next_master_port() {
  if (round_.ranks.group_rank != 0) return std::nullopt;
  int port = 0;
  try {
    port = ctx_.open_workers_store();
  } catch (const Error& e) {
    spdlog::warn("could not open the next round's workers' store: {}", e.what());
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

bool Settler::send_next_watch_ahead() {
  if (!ctx_.spare_watch_store) return false;
  auto* pipelining = ctx_.spare_watch_store->pipelining();
  const auto next = ctx_.rendezvous->next_prefix(round_);
  if (pipelining == nullptr || next.empty()) return false;
  if (!pipelining->pipeline_get(RoundChannel::outcome_key(next),
                                Deadline::after(OutcomeWatcher::kWaitBound))) {
    return false;
  }
  channel_.arrive_on(*ctx_.spare_watch_store);
  return true;
}

Settlement Settler::settle(const Failure& decided, bool chose,
                           std::chrono::milliseconds settle_time,
                           const std::function<void(Failure&)>& refine) {
  const auto offered = offer_next_master_port();
  std::optional<SideConnection::Use> side;
  if (send_next_watch_ahead()) side.emplace(side_, *ctx_.spare_watch_store);
  // The chooser closes the next round ahead when the job restarts from its pick, as the agent
  // will decide (Agent::run_rounds).
  const auto close_next = [this](const Failure& root) -> std::optional<std::string> {
    if (!restarts_after(root, round_.restart_count, config_.max_restarts, signal_)) {
      return std::nullopt;
    }
    return ctx_.rendezvous->settle_next_round(round_, round_.restart_count + 1);
  };
  auto cause = channel_.resolve_root_cause(decided, chose, settle_time, refine, close_next);
  Settlement s;
  s.root_cause = std::move(cause.failure);
  s.end.all_stopped = cause.all_stopped;
  s.end.chose_root_cause = chose;
  s.end.next_round = std::move(cause.next_round);
  s.end.next_master_port = offered ? offered : cause.next_master_port;
  return s;
}

}  // namespace ddprun
