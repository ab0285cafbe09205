#include "agent/elastic_rendezvous.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

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

std::string round_key(int round, const std::string& name) {
  return fmt::format("r/{}/{}", round, name);
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

RoundResult join_round(Store& store, int round, const ElasticNode& self,
                       const ElasticRendezvousOptions& o) {
  const auto start = Clock::now();
  const auto op = [&] { return Deadline::after(o.read_timeout); };
  RoundResult result;
  result.round = round;
  result.slot = static_cast<int>(store.add(round_key(round, "join"), 1, op())) - 1;
  store.set(round_key(round, fmt::format("node/{}", result.slot)), to_json(self), op());
  spdlog::info("rendezvous: joined round {} as node slot {} (need {}..{} nodes)", round,
               result.slot, o.min_nodes, o.max_nodes);

  const auto closed_key = round_key(round, "closed");
  // The closer (one node, chosen by compare_set on "closing") reads every descriptor once,
  // computes the order and the ranks, writes each member its own assignment, and only then
  // publishes "closed". Every other node reads two small keys: O(n) traffic in all, not O(n^2).
  // Members are the slots that had published a descriptor, so a joiner that died half-way is
  // left out instead of stalling everyone.
  auto close_with = [&](int joined) {
    if (store.compare_set(round_key(round, "closing"), "", self.id, op()) != self.id) return;
    const int candidates = std::min(joined, o.max_nodes);
    std::vector<std::string> keys;
    for (int s = 0; s < candidates; ++s) keys.push_back(round_key(round, fmt::format("node/{}", s)));
    std::vector<std::optional<std::string>> records(keys.size());
    try {
      auto values = store.multi_get(keys, Deadline::after(std::min<std::chrono::milliseconds>(
                                              o.read_timeout, std::chrono::seconds(5))));
      for (std::size_t i = 0; i < values.size(); ++i) records[i] = std::move(values[i]);
    } catch (const TimeoutError&) {
      for (std::size_t i = 0; i < keys.size(); ++i) records[i] = store.try_get(keys[i], op());
    }
    std::vector<std::pair<int, ElasticNode>> members;
    int failures = 0;
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (!records[i]) {
        spdlog::warn("rendezvous: round {} slot {} never published its node; left out", round, i);
        continue;
      }
      members.emplace_back(static_cast<int>(i), node_from_json(*records[i]));
      failures = std::max(failures, members.back().second.failures);
    }
    // Stayers first in their old order, then newcomers in join order.
    std::stable_sort(members.begin(), members.end(), [](const auto& a, const auto& b) {
      auto order = [](const auto& e) {
        return std::pair{e.second.prev_rank < 0 ? 1 : 0,
                         e.second.prev_rank < 0 ? e.first : e.second.prev_rank};
      };
      return order(a) < order(b);
    });
    const int n = static_cast<int>(members.size());
    int world_size = 0;
    std::vector<std::string> assign_keys;
    std::vector<std::string> assignments;
    for (int g = 0; g < n; ++g) {
      const auto& [slot, node] = members[static_cast<std::size_t>(g)];
      assign_keys.push_back(round_key(round, fmt::format("assign/{}", slot)));
      assignments.push_back(
          json{{"group_rank", g}, {"base_rank", world_size},
               {"successor_host", members[static_cast<std::size_t>((g + 1) % n)].second.host}}
              .dump());
      world_size += node.nproc;
    }
    if (n > 0) store.multi_set(assign_keys, assignments, op());
    store.set(closed_key,
              json{{"members", n}, {"world_size", world_size}, {"failures", failures},
                   {"master_host", n > 0 ? members[0].second.host : std::string()}}
                  .dump(),
              op());
  };
  if (result.slot + 1 == o.max_nodes) {
    close_with(o.max_nodes);  // full: no reason to wait for anyone
  } else if (result.slot + 1 >= o.min_nodes && result.slot + 1 < o.max_nodes) {
    try {
      store.wait({closed_key}, Deadline::after(o.last_call_timeout));
    } catch (const TimeoutError&) {
      close_with(static_cast<int>(store.add(round_key(round, "join"), 0, op())));
    }
  }

  std::string closed;
  try {
    closed = store.get(closed_key, Deadline::at(start + o.join_timeout));
  } catch (const TimeoutError&) {
    auto joined = store.add(round_key(round, "join"), 0, op());
    throw TimeoutError(fmt::format(
        "rendezvous timed out after {}: {} node(s) joined round {}, at least {} needed "
        "(store at {})",
        format_duration(Clock::now() - start), joined, round, o.min_nodes, store.describe()));
  }
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
  auto assignment = store.try_get(round_key(round, fmt::format("assign/{}", result.slot)), op());
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

}  // namespace ddprun
