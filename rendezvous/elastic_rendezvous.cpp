#include "rendezvous/elastic_rendezvous.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "common/progress.hpp"
#include "rendezvous/prefix_store.hpp"

namespace ddprun {

using nlohmann::json;

namespace {

std::string to_json(const ElasticNode& n) {
  return json{{"id", n.id}, {"host", n.host}, {"nproc", n.nproc}, {"prev_rank", n.prev_rank},
              {"failures", n.failures}}.dump();
}

ElasticNode node_from_json(const std::string& text) {
  try {
    auto j = json::parse(text);
    return ElasticNode{j.at("id"), j.at("host"), j.at("nproc"), j.at("prev_rank"),
                       j.at("failures")};
  } catch (const json::exception& e) {
    throw RendezvousError(fmt::format("malformed node descriptor '{}': {}", text, e.what()));
  }
}

int to_int(const std::string& text, const char* what) {
  try {
    return std::stoi(text);
  } catch (const std::exception&) {
    throw RendezvousError(fmt::format("store holds '{}' for {}, not a number", text, what));
  }
}

}  // namespace

std::string round_prefix(int round) { return fmt::format("r/{}", round); }

std::string round_key(int round, const std::string& name) {
  return round_prefix(round) + "/" + name;
}

int current_round(Store& store, Deadline deadline) {
  return to_int(store.compare_set("round", "", "0", deadline), "the round");
}

int advance_round(Store& store, int round, Deadline deadline) {
  auto now = to_int(store.compare_set("round", std::to_string(round), std::to_string(round + 1),
                                      deadline),
                    "the round");
  return std::max(now, round + 1);
}

std::vector<RoundMember> order_members(std::vector<RoundCandidate> candidates) {
  // Stayers first in their old order, then newcomers in join order.
  auto order = [](const RoundCandidate& c) {
    return c.node.prev_rank < 0 ? std::pair{1, c.slot} : std::pair{0, c.node.prev_rank};
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const auto& a, const auto& b) { return order(a) < order(b); });
  std::vector<int> sizes;
  sizes.reserve(candidates.size());
  for (const auto& c : candidates) sizes.push_back(c.node.nproc);
  const auto ranks = assign_all_ranks(sizes);
  std::vector<RoundMember> members(candidates.size());
  for (std::size_t g = 0; g < candidates.size(); ++g) {
    members[g].slot = candidates[g].slot;
    members[g].host = candidates[g].node.host;
    members[g].ranks = ranks[g];
    members[g].successor_host = candidates[(g + 1) % candidates.size()].node.host;
  }
  return members;
}

RoundResult join_round(Store& store, int round, const ElasticNode& self,
                       const ElasticRendezvousOptions& o) {
  const auto start = Clock::now();
  const auto op = [&] { return Deadline::after(o.read_timeout); };
  PrefixStore rs(round_prefix(round), store);  // this round's keys
  RoundResult result;
  result.round = round;
  result.slot = static_cast<int>(rs.add("join", 1, op())) - 1;
  rs.set(fmt::format("node/{}", result.slot), to_json(self), op());
  spdlog::info("rendezvous: joined round {} as node slot {} (need {}..{} nodes)", round,
               result.slot, o.min_nodes, o.max_nodes);

  const std::string closed_key = "closed";
  // The closer (one node, chosen by compare_set on "closing") reads every descriptor once,
  // computes the order and the ranks, writes each member its own assignment, and only then
  // publishes "closed". Every other node reads two small keys: O(n) traffic in all, not O(n^2).
  // Members are the slots that had published a descriptor, so a joiner that died half-way is
  // left out instead of stalling everyone.
  auto close_with = [&](int joined) {
    if (rs.compare_set("closing", "", self.id, op()) != self.id) return;
    const int slots = std::min(joined, o.max_nodes);
    std::vector<std::string> keys;
    for (int s = 0; s < slots; ++s) keys.push_back(fmt::format("node/{}", s));
    std::vector<std::optional<std::string>> records(keys.size());
    try {
      auto values = rs.multi_get(keys, Deadline::after(std::min<std::chrono::milliseconds>(
                                              o.read_timeout, std::chrono::seconds(5))));
      for (std::size_t i = 0; i < values.size(); ++i) records[i] = std::move(values[i]);
    } catch (const TimeoutError&) {
      for (std::size_t i = 0; i < keys.size(); ++i) records[i] = rs.try_get(keys[i], op());
    }
    std::vector<RoundCandidate> candidates;
    int failures = 0;
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (!records[i]) {
        spdlog::warn("rendezvous: round {} slot {} never published its node; left out", round, i);
        continue;
      }
      candidates.push_back({static_cast<int>(i), node_from_json(*records[i])});
      failures = std::max(failures, candidates.back().node.failures);
    }
    const auto members = order_members(std::move(candidates));
    const int n = static_cast<int>(members.size());
    const int world_size = n > 0 ? members.front().ranks.world_size : 0;
    std::vector<std::string> assign_keys;
    std::vector<std::string> assignments;
    for (const auto& m : members) {
      assign_keys.push_back(fmt::format("assign/{}", m.slot));
      assignments.push_back(json{{"group_rank", m.ranks.group_rank},
                                 {"base_rank", m.ranks.base_rank},
                                 {"successor_host", m.successor_host}}
                                .dump());
    }
    if (n > 0) rs.multi_set(assign_keys, assignments, op());
    rs.set(closed_key,
           json{{"members", n}, {"world_size", world_size}, {"failures", failures},
                {"master_host", n > 0 ? members.front().host : std::string()}}
               .dump(),
           op());
  };
  // Waits for the round to close until `deadline`, saying how far it got now and then.
  // Returns the round record, or nullopt when the deadline passed.
  ProgressClock progress(o.progress_interval);
  auto await_closed = [&](Deadline deadline, bool last_call) -> std::optional<std::string> {
    while (true) {
      try {
        return rs.get(closed_key, progress.slice(deadline));
      } catch (const TimeoutError&) {
        if (deadline.expired()) return std::nullopt;
      }
      if (!progress.due()) continue;
      const auto joined = rs.add("join", 0, op());
      if (last_call) {
        spdlog::info("rendezvous: round {}: {} node(s) joined ({}..{} wanted); closing in {} "
                     "unless {} more join",
                     round, joined, o.min_nodes, o.max_nodes, format_duration(deadline.remaining()),
                     o.max_nodes - joined);
      } else {
        spdlog::info("rendezvous: round {}: {} node(s) joined, at least {} needed; {} (store at {})",
                     round, joined, o.min_nodes, progress.elapsed_of(o.join_timeout),
                     store.describe());
      }
    }
  };
  if (result.slot + 1 == o.max_nodes) {
    close_with(o.max_nodes);  // full: no reason to wait for anyone
  } else if (result.slot + 1 >= o.min_nodes && result.slot + 1 < o.max_nodes) {
    if (!await_closed(Deadline::after(o.last_call_timeout), true)) {
      close_with(static_cast<int>(rs.add("join", 0, op())));
    }
  }

  auto closed_record = await_closed(Deadline::at(start + o.join_timeout), false);
  if (!closed_record) {
    auto joined = rs.add("join", 0, op());
    throw TimeoutError(fmt::format(
        "rendezvous timed out after {}: {} node(s) joined round {}, at least {} needed "
        "(store at {})",
        format_duration(Clock::now() - start), joined, round, o.min_nodes, store.describe()));
  }
  const std::string& closed = *closed_record;
  int world_size = 0;
  try {
    auto j = json::parse(closed);
    result.members = j.at("members");
    result.failures = j.at("failures");
    world_size = j.at("world_size");
    result.master_host = j.at("master_host");
  } catch (const json::exception& e) {
    throw RendezvousError(fmt::format("malformed round record '{}': {}", closed, e.what()));
  }
  // Assignments are written before "closed": no assignment now means not a member.
  auto assignment = rs.try_get(fmt::format("assign/{}", result.slot), op());
  result.member = assignment.has_value();
  if (!result.member) return result;
  int group_rank = 0;
  try {
    auto j = json::parse(*assignment);
    group_rank = j.at("group_rank");
    result.successor_host = j.at("successor_host");
    result.ranks.base_rank = j.at("base_rank");
  } catch (const json::exception& e) {
    throw RendezvousError(fmt::format("malformed assignment '{}': {}", *assignment, e.what()));
  }
  result.ranks.group_rank = group_rank;
  result.ranks.group_world_size = result.members;
  result.ranks.local_world_size = self.nproc;
  result.ranks.world_size = world_size;
  spdlog::info("rendezvous: round {} closed in {} with {} nodes; this node is group rank {} "
               "(ranks {}..{} of {})",
               round, format_duration(Clock::now() - start), result.members, group_rank,
               result.ranks.base_rank, result.ranks.base_rank + result.ranks.local_world_size - 1,
               result.ranks.world_size);
  return result;
}

ElasticRendezvous::ElasticRendezvous(Store& store, StoreOpener open_store,
                                     ElasticRendezvousOptions options, ElasticNode self,
                                     KeepAliveTiming keep_alive, int max_restarts,
                                     KeepAliveFactory keep_alive_factory)
    : store_(store),
      open_store_(std::move(open_store)),
      options_(options),
      self_(std::move(self)),
      keep_alive_(keep_alive),
      max_restarts_(max_restarts),
      keep_alive_factory_(std::move(keep_alive_factory)) {}

NextRound ElasticRendezvous::next_round(int restart_count) {
  if (round_ < 0) round_ = current_round(store_, op());
  self_.failures = restart_count;
  while (true) {
    emit("rendezvous_started", {{"round", round_}, {"min_nodes", options_.min_nodes},
                                {"max_nodes", options_.max_nodes}});
    auto joined = join_round(store_, round_, self_, options_);
    if (!joined.member) {
      if (auto outcome = outsider(joined)) return NextRound{std::nullopt, *outcome};
      round_ = advance_round(store_, round_, op());
      continue;
    }
    Round round;
    round.id = joined.round;
    round.prefix = round_prefix(joined.round);
    round.ranks = joined.ranks;
    round.restart_count = joined.failures;
    round.master_addr = joined.master_host;
    // Only the hosts this node needs: group rank 0's (the master) and the one it watches.
    round.hosts.assign(static_cast<std::size_t>(joined.members), std::string());
    round.hosts[0] = joined.master_host;
    round.hosts[static_cast<std::size_t>((joined.ranks.group_rank + 1) % joined.members)] =
        joined.successor_host;
    emit("rendezvous_completed",
         {{"round", joined.round}, {"world_size", joined.ranks.world_size},
          {"members", joined.members}, {"group_rank", joined.ranks.group_rank},
          {"base_rank", joined.ranks.base_rank}});
    return NextRound{std::move(round), {}};
  }
}

void ElasticRendezvous::round_ended(const Round& round) {
  self_.prev_rank = round.ranks.group_rank;
  round_ = advance_round(store_, round.id, op());
}

std::optional<std::string> ElasticRendezvous::outsider(const RoundResult& r) {
  const auto outcome_key = round_key(r.round, "outcome");
  std::string value;
  if (r.members < options_.max_nodes) {
    spdlog::info("rendezvous: round {} runs with {} nodes; asking them to re-form with this one",
                 r.round, r.members);
    const auto join = agent_failure(self_.host, -1, self_.failures, Failure::Kind::kMembership, 0,
                                    fmt::format("node {} is waiting to join", self_.host));
    value = store_.compare_set(outcome_key, "", join.to_json(), op());
  } else {
    spdlog::info("rendezvous: round {} is full ({} nodes); waiting as a hot spare", r.round,
                 r.members);
    // Re-armed every hour so that each wait is bounded like every other.
    while (true) {
      try {
        value = store_.get(outcome_key, Deadline::after(std::chrono::hours(1)));
        break;
      } catch (const TimeoutError&) {
      }
    }
  }
  if (value == kRoundSucceeded) return value;
  const auto f = Failure::from_json(value);
  const bool job_failed = (f.kind == Failure::Kind::kWorker && r.failures >= max_restarts_) ||
                          f.kind == Failure::Kind::kAgent;
  if (job_failed) return value;
  return std::nullopt;
}

std::unique_ptr<KeepAlive> ElasticRendezvous::keep_alive(const Round& round, LostCallback on_lost,
                                                         ErrorCallback on_error) {
  if (keep_alive_factory_) return keep_alive_factory_(round, std::move(on_lost), std::move(on_error));
  return ring_keep_alive(open_store_, round, keep_alive_, std::move(on_lost), std::move(on_error));
}

void ElasticRendezvous::leave_early(const Round& round) {
  mark_left_on_purpose(store_, round, op());
}

}  // namespace ddprun
