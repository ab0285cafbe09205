#include "agent/static_rendezvous.hpp"

#include <unistd.h>

#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

using nlohmann::json;

namespace {

std::string info_key(int g) { return fmt::format("static/node/{}/info", g); }

}  // namespace

std::string make_claim_token(const NodeInfo& self) {
  std::random_device rd;
  return fmt::format("{} pid {} ({:08x})", self.host, self.pid, rd());
}

std::string owner_key(int node_rank) { return fmt::format("static/node/{}/owner", node_rank); }

RendezvousResult static_rendezvous(Store& store, const StaticRendezvousOptions& o) {
  const auto start = Clock::now();
  const auto deadline = Deadline::after(o.join_timeout);
  const std::string nnodes = std::to_string(o.nnodes);
  auto agreed = store.compare_set("static/nnodes", "", nnodes, deadline);
  if (agreed != nnodes) {
    throw RendezvousError(fmt::format(
        "this node was started with --nnodes={} but another node used --nnodes={} "
        "(store at {})", o.nnodes, agreed, store.describe()));
  }

  const auto token = o.token.empty() ? make_claim_token(o.self) : o.token;
  auto owner = store.compare_set(owner_key(o.node_rank), "", token, deadline);
  if (owner != token) {
    throw RendezvousError(fmt::format(
        "node rank {} is already taken by {}; every node needs its own --node-rank in 0..{}",
        o.node_rank, owner, o.nnodes - 1));
  }

  json info = {{"host", o.self.host}, {"nproc", o.self.local_world_size}, {"pid", o.self.pid}};
  store.set(info_key(o.node_rank), info.dump(), deadline);
  std::vector<std::string> keys;
  for (int g = 0; g < o.nnodes; ++g) keys.push_back(info_key(g));
  spdlog::info("rendezvous: node {} of {} joined; waiting for the others (store at {})",
               o.node_rank, o.nnodes, store.describe());
  try {
    store.wait(keys, deadline);
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    for (int g = 0; g < o.nnodes; ++g) {
      if (!store.check({info_key(g)}, Deadline::after(std::chrono::seconds(5)))) {
        missing.push_back(g);
      }
    }
    throw TimeoutError(fmt::format(
        "rendezvous timed out after {}: {}/{} nodes joined (missing node ranks {}); store at {}",
        format_duration(Clock::now() - start), o.nnodes - static_cast<int>(missing.size()),
        o.nnodes, missing, store.describe()));
  }

  RendezvousResult result;
  std::vector<int> sizes;
  for (const auto& text : store.multi_get(keys, deadline)) {
    try {
      auto j = json::parse(text);
      NodeInfo n{j.at("host").get<std::string>(), j.at("nproc").get<int>(),
                 j.at("pid").get<int>()};
      sizes.push_back(n.local_world_size);
      result.nodes.push_back(std::move(n));
    } catch (const json::exception& e) {
      throw RendezvousError(fmt::format("malformed node record '{}' in the store: {}", text,
                                        e.what()));
    }
  }
  result.ranks = assign_ranks(sizes, o.node_rank);
  spdlog::info("rendezvous: complete in {}: {} nodes, {} workers, this node's ranks {}..{}",
               format_duration(Clock::now() - start), o.nnodes, result.ranks.world_size,
               result.ranks.base_rank,
               result.ranks.base_rank + result.ranks.local_world_size - 1);
  return result;
}

}  // namespace ddprun
