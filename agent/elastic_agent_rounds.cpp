// ElasticAgent, elastic mode (--rdzv-backend=c10d): the loop over rendezvous rounds, and what
// a node that is not in the current round does. The attempt itself is elastic_agent.cpp's.

#include "agent/elastic_agent.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/elastic_rendezvous.hpp"
#include "common/error.hpp"

namespace ddprun {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

RunResult ElasticAgent::run_elastic() {
  ElasticRendezvousOptions o;
  o.min_nodes = config_.min_nodes;
  o.max_nodes = config_.max_nodes;
  o.join_timeout = config_.rdzv_conf.join_timeout;
  o.last_call_timeout = config_.rdzv_conf.last_call_timeout;
  o.read_timeout = config_.rdzv_conf.read_timeout;
  ElasticNode self;
  self.id = fmt::format("{}:{}", ctx_.host, getpid());
  self.host = ctx_.host;
  self.nproc = config_.nproc_per_node;
  const auto op = [&] { return Deadline::after(config_.rdzv_conf.read_timeout); };

  int round = current_round(*ctx_.store, op());
  while (true) {
    self.failures = attempt_;
    emit("rendezvous_started", {{"round", round}, {"min_nodes", o.min_nodes},
                                {"max_nodes", o.max_nodes}});
    auto joined = join_round(*ctx_.store, round, self, o);
    if (!joined.member) {
      if (auto done = outsider(joined)) return *done;
      round = advance_round(*ctx_.store, round, op());
      continue;
    }
    round_ = round;
    prefix_ = fmt::format("r/{}", round);
    attempt_ = joined.failures;
    rdzv_.ranks = joined.ranks;
    // Only the hosts this node needs: group rank 0's (the master) and the one it watches.
    rdzv_.nodes.assign(static_cast<std::size_t>(joined.members), NodeInfo{});
    rdzv_.nodes[0].host = joined.master_host;
    rdzv_.nodes[static_cast<std::size_t>((joined.ranks.group_rank + 1) % joined.members)].host =
        joined.successor_host;
    master_addr_ = joined.master_host;
    rendezvous_done_ = true;
    emit("rendezvous_completed", {{"round", round}, {"world_size", joined.ranks.world_size},
                                  {"members", joined.members}, {"group_rank", joined.ranks.group_rank},
                                  {"base_rank", joined.ranks.base_rank}});

    auto outcome = run_attempt();
    self.prev_rank = rdzv_.ranks.group_rank;
    if (outcome.success) return finish_success();
    const auto& f = outcome.failure;
    if (f.kind == Failure::Kind::kSignal) return finish_failure(f);
    if (f.kind == Failure::Kind::kMembership) {
      spdlog::warn("round {} ends: {}; re-forming without spending a restart", round, f.message);
    } else if (retryable(f) && attempt_ < config_.max_restarts) {
      log_restart(f);
      ++attempt_;
      emit("restart", {{"attempt", attempt_}, {"round", round + 1}});
    } else {
      return finish_failure(f);
    }
    round = advance_round(*ctx_.store, round, op());
  }
}

// This node is not in round `r.round`: it came too late, or the round is full (a hot spare).
// A late node asks the members to re-form with it; a spare waits until the round ends.
// Returns a result when the job is over, nullopt to join the next round.
std::optional<RunResult> ElasticAgent::outsider(const RoundResult& r) {
  const auto outcome_key = round_key(r.round, "outcome");
  std::string value;
  if (r.members < config_.max_nodes) {
    Failure join = agent_failure(fmt::format("node {} is waiting to join", ctx_.host));
    join.kind = Failure::Kind::kMembership;
    spdlog::info("rendezvous: round {} runs with {} nodes; asking them to re-form with this one",
                 r.round, r.members);
    value = ctx_.store->compare_set(outcome_key, "", join.to_json(),
                                    Deadline::after(config_.rdzv_conf.read_timeout));
  } else {
    spdlog::info("rendezvous: round {} is full ({} nodes); waiting as a hot spare", r.round,
                 r.members);
    while (true) {
      try {
        value = ctx_.store->get(outcome_key, Deadline::after(1h));
        break;
      } catch (const TimeoutError&) {
      }
    }
  }
  if (value == kSuccess) {
    RunResult result;
    result.reason = "the job finished without this node";
    return result;
  }
  auto f = Failure::from_json(value);
  const bool final_failure = (f.kind == Failure::Kind::kWorker &&
                              r.failures >= config_.max_restarts) ||
                             f.kind == Failure::Kind::kAgent;
  if (final_failure) {
    RunResult result;
    result.exit_code = f.exit_code != 0 ? f.exit_code : kExitInternal;
    result.root_cause = f;
    result.reason = "the job failed without this node: " +
                    (f.kind == Failure::Kind::kWorker
                         ? fmt::format("rank {} on {} exited with code {}", f.rank, f.host, f.exit_code)
                         : f.message);
    return result;
  }
  return std::nullopt;
}

}  // namespace ddprun
