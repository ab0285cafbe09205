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
  // Closing names the member slots explicitly: a node that took a slot and died before
  // publishing its descriptor is left out instead of stalling everyone.
  auto close_with = [&](int joined) {
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
    json slots = json::array();
    int failures = 0;
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (!records[i]) {
        spdlog::warn("rendezvous: round {} slot {} never published its node; left out", round, i);
        continue;
      }
      slots.push_back(i);
      failures = std::max(failures, node_from_json(*records[i]).failures);
    }
    store.compare_set(closed_key, "", json{{"slots", slots}, {"failures", failures}}.dump(), op());
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
  std::vector<int> slots;
  try {
    auto j = json::parse(closed);
    slots = j.at("slots").get<std::vector<int>>();
    result.failures = j.at("failures");
  } catch (const json::exception& e) {
    throw RendezvousError(fmt::format("malformed round record '{}': {}", closed, e.what()));
  }
  result.members = static_cast<int>(slots.size());
  result.member = std::find(slots.begin(), slots.end(), result.slot) != slots.end();
  if (!result.member) return result;

  std::vector<std::string> keys;
  for (int s : slots) keys.push_back(round_key(round, fmt::format("node/{}", s)));
  std::vector<std::pair<int, ElasticNode>> by_slot;
  auto records = store.multi_get(keys, op());
  for (std::size_t i = 0; i < records.size(); ++i) {
    by_slot.emplace_back(slots[i], node_from_json(records[i]));
  }
  // Stayers first in their old order, then newcomers in join order: every node computes the
  // same order from the same records.
  std::stable_sort(by_slot.begin(), by_slot.end(), [](const auto& a, const auto& b) {
    auto key = [](const auto& e) {
      return std::pair{e.second.prev_rank < 0 ? 1 : 0, e.second.prev_rank < 0 ? e.first
                                                                             : e.second.prev_rank};
    };
    return key(a) < key(b);
  });
  std::vector<int> sizes;
  int group_rank = -1;
  for (std::size_t i = 0; i < by_slot.size(); ++i) {
    if (by_slot[i].first == result.slot) group_rank = static_cast<int>(i);
    sizes.push_back(by_slot[i].second.nproc);
    result.nodes.push_back(by_slot[i].second);
  }
  result.ranks = assign_ranks(sizes, group_rank);
  spdlog::info("rendezvous: round {} closed in {} with {} nodes; this node is group rank {} "
               "(ranks {}..{} of {})",
               round, format_duration(Clock::now() - start), result.members, group_rank,
               result.ranks.base_rank, result.ranks.base_rank + result.ranks.local_world_size - 1,
               result.ranks.world_size);
  return result;
}

}  // namespace ddprun
