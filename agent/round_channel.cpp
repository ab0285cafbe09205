#include "agent/round_channel.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

namespace {

// The root cause's record: the failure's own fields, whether every node had settled, and the
// next attempt's master port when group rank 0 offered one (under the same name in the round's
// news).
constexpr const char* kAllStopped = "all_stopped";
constexpr const char* kNextMasterPort = "next_master_port";
constexpr const char* kNextRound = "next_round";
// The master port's value once the round was decided without one: not a number, so that no
// reader can take it for a port.
constexpr const char* kNoMasterPort = "withdrawn";

}  // namespace

RoundChannel::RoundChannel(store::Store& store, const Round& round,
                           std::chrono::milliseconds read_timeout)
    : base_(store),
      arrival_(&store),
      store_(round.prefix, store),
      news_(round.news_prefix(), store),
      round_(round),
      read_timeout_(read_timeout) {}

std::string RoundChannel::outcome_key() const { return outcome_key(round_.prefix); }

std::string RoundChannel::outcome_key(const std::string& prefix) {
  return kNewsPrefix + prefix + "/outcome";
}

void RoundChannel::publish_master_port(int port) {
  news_.set("master_port", std::to_string(port), op());
}

std::optional<int> RoundChannel::master_port(Deadline deadline) {
  const auto value = news_.get("master_port", deadline);
  if (value == kNoMasterPort) return std::nullopt;
  return static_cast<int>(store::parse_counter(value, "master_port"));
}

void RoundChannel::withdraw_master_port() {
  news_.compare_set("master_port", "", kNoMasterPort, op());
}

void RoundChannel::offer_next_master_port(int port) {
  news_.set(kNextMasterPort, std::to_string(port), op());
}

std::string RoundChannel::publish_outcome(const std::string& value) {
  return news_.compare_set("outcome", "", value, op());
}

std::string RoundChannel::outcome(Deadline deadline) { return news_.get("outcome", deadline); }

std::optional<std::string> RoundChannel::report_success() {
  store_.set(fmt::format("done/{}", round_.ranks.group_rank), "1", op());
  const auto done = store_.add("succeeded", 1, op());
  if (done != round_.ranks.group_world_size) return std::nullopt;
  return news_.compare_set("outcome", "", kRoundSucceeded, op());
}

std::vector<int> RoundChannel::nodes_still_running() {
  std::vector<int> running;
  for (int g = 0; g < round_.ranks.group_world_size; ++g) {
    if (!store_.check({fmt::format("done/{}", g)}, op())) running.push_back(g);
  }
  return running;
}

// Every local worker failure of the round goes on a list in the store; the root cause is the
// earliest of them, not merely the first one published (a peer of a crashed rank often fails
// within milliseconds, and its agent may win the race to the store).
void RoundChannel::record_failure(const Failure& failure) {
  try {
    const auto n = store_.add("failures", 1, op());
    store_.set(fmt::format("failure/{}", n), failure.to_json(), op());
  } catch (const Error& e) {
    spdlog::warn("could not record the failure of rank {}: {}", failure.rank, e.what());
  }
}

std::int64_t RoundChannel::vote_idle() { return store_.add("hang/idle", 1, op()); }

void RoundChannel::withdraw_idle() { store_.add("hang/idle", -1, op()); }

void RoundChannel::record_where(const std::vector<RankWhere>& ranks) {
  try {
    store_.set(fmt::format("where/{}", round_.ranks.group_rank), where_to_json(ranks), op());
  } catch (const Error& e) {
    spdlog::warn("could not share where this node's ranks were: {}", e.what());
  }
}

std::vector<RankWhere> RoundChannel::all_where() {
  std::vector<RankWhere> all;
  for (int g = 0; g < round_.ranks.group_world_size; ++g) {
    try {
      if (auto text = store_.try_get(fmt::format("where/{}", g), op())) {
        auto node = where_from_json(*text);
        all.insert(all.end(), node.begin(), node.end());
      }
    } catch (const Error& e) {
      spdlog::warn("could not read where node {}'s ranks were: {}", g, e.what());
    }
  }
  return all;
}

namespace {

RootCause parse_root_cause(const std::string& text) {
  RootCause r{Failure::from_json(text), false, std::nullopt, std::nullopt};
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return r;
  r.all_stopped = j.value(kAllStopped, false);
  if (const auto port = j.find(kNextMasterPort); port != j.end() && port->is_number_integer()) {
    r.next_master_port = port->get<int>();
  }
  if (const auto next = j.find(kNextRound); next != j.end() && next->is_string()) {
    r.next_round = next->get<std::string>();
  }
  return r;
}

}  // namespace

RootCause RoundChannel::resolve_root_cause(const Failure& first, bool chooser,
                                           std::chrono::milliseconds settle_time,
                                           const std::function<void(Failure&)>& refine,
                                           const Settle& settle) {
  const auto deadline = Deadline::after(settle_time);
  // Each node counts itself settled; the last one releases the chooser. A node that did not
  // choose then waits for the root cause: with its arrival, one request to a TCP store.
  const auto settled = store_.full("settled");
  const auto all_settled = store_.full("all_settled");
  const int nodes = round_.ranks.group_world_size;
  try {
    if (!chooser) {
      // A little longer than the chooser may wait, so that its answer is not missed.
      return parse_root_cause(arrival_
                                  ->arrive(settled, nodes, all_settled, news_.full("root_cause"),
                                          Deadline::at(deadline.when() + std::chrono::seconds(5)))
                                  .value);
    }
    bool all_stopped = true;
    try {
      arrival_->arrive(settled, nodes, all_settled, all_settled, deadline);
    } catch (const TimeoutError&) {
      all_stopped = false;
      spdlog::warn("not every node reported its failures within {}; choosing among those that did",
                   format_duration(settle_time));
    }
    Failure earliest = first;
    const auto n = store_.add("failures", 0, op());
    for (std::int64_t i = 1; i <= n; ++i) {
      auto text = store_.try_get(fmt::format("failure/{}", i), op());
      if (!text) continue;
      auto f = Failure::from_json(*text);
      if (f.unix_time < earliest.unix_time) earliest = f;
    }
    if (refine) refine(earliest);
    auto record = nlohmann::json::parse(earliest.to_json());
    record[kAllStopped] = all_stopped;
    RootCause cause{earliest, all_stopped, std::nullopt, std::nullopt};
    // Group rank 0 offers the port before it settles, so it is there once every node has (and
    // may be, when the settle timed out); a port in the root cause spares every node a read of
    // its own on the next round's path. Without it they read the port group rank 0 publishes.
    try {
      if (auto port = news_.try_get(kNextMasterPort, op())) {
        cause.next_master_port = static_cast<int>(store::parse_counter(*port, kNextMasterPort));
        record[kNextMasterPort] = *cause.next_master_port;
      }
    } catch (const Error& e) {
      spdlog::warn("could not read the next round's master port: {}", e.what());
    }
    // Every node back: the next round may be closed now, so that no node forms it.
    if (all_stopped && settle) {
      try {
        cause.next_round = settle(earliest);
        if (cause.next_round) record[kNextRound] = *cause.next_round;
      } catch (const Error& e) {
        spdlog::warn("could not close the next round ahead: {}; it forms as usual", e.what());
      }
    }
    try {
      news_.set("root_cause", record.dump(), op());
    } catch (const Error& e) {
      // The set may have reached the store all the same: what the others read decides whether
      // they wait at the next start barrier, so this node goes by the same record.
      spdlog::warn("could not publish the root cause: {}; reading it back", e.what());
      if (auto published = news_.try_get("root_cause", op())) return parse_root_cause(*published);
      cause.all_stopped = false;
    }
    return cause;
  } catch (const Error& e) {
    spdlog::warn("could not agree on the root cause: {}; reporting the first failure published",
                 e.what());
    return RootCause{first, false, std::nullopt, std::nullopt};
  }
}

namespace {

std::string goodbye_key(int group_rank) { return fmt::format("left/{}", group_rank); }

}  // namespace

void RoundChannel::leave(Deadline deadline) {
  store_.set(goodbye_key(round_.ranks.group_rank), "1", deadline);
}

void RoundChannel::wait_for_goodbyes(int lost_node, Deadline deadline) {
  std::vector<int> expected;
  std::vector<std::string> keys;
  for (int g = 0; g < round_.ranks.group_world_size; ++g) {
    if (g == lost_node) continue;
    expected.push_back(g);
    keys.push_back(goodbye_key(g));
  }
  const auto started = Clock::now();
  try {
    store_.wait(keys, deadline);
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    for (const int g : expected) {
      if (!store_.check({goodbye_key(g)}, op())) missing.push_back(g);
    }
    throw TimeoutError(fmt::format("node(s) {} did not say goodbye within {}", missing,
                                   format_duration(Clock::now() - started)));
  }
}

}  // namespace ddprun
