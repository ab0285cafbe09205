// Tree fan-out planning: every host exactly once, no agent holding more than `width`
// connections, a depth that grows like log_width(N), and the plan surviving the session hello.

#include <catch2/catch.hpp>

#include <set>

#include "cluster/tree.hpp"
#include "common/error.hpp"

using namespace ddprun;

namespace {

std::vector<TreeEntry> hosts(int n) {
  std::vector<TreeEntry> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(
        {i, "h" + std::to_string(i), {"ssh", "h"}, {"--node-rank=" + std::to_string(i)}, {}});
  }
  return out;
}

void collect(const std::vector<TreeEntry>& entries, std::multiset<int>& nodes, int depth,
             int& max_depth, std::size_t& max_width) {
  max_width = std::max(max_width, entries.size());
  max_depth = std::max(max_depth, depth);
  for (const auto& e : entries) {
    nodes.insert(e.node);
    if (!e.subtree.empty()) collect(e.subtree, nodes, depth + 1, max_depth, max_width);
  }
}

}  // namespace

TEST_CASE("tree: up to the width, every host is started directly", "[cluster][tree]") {
  CHECK(plan_tree(hosts(32), 32) == hosts(32));
  CHECK(plan_tree(hosts(1), 32) == hosts(1));
  CHECK(plan_tree({}, 32).empty());
}

TEST_CASE("tree: every host once, width bounded, depth logarithmic", "[cluster][tree]") {
  for (auto [n, width, expected_depth] : {std::tuple{33, 32, 2}, std::tuple{1024, 32, 2},
                                         std::tuple{1057, 32, 3}, std::tuple{100, 3, 4},
                                         std::tuple{10, 2, 3}}) {
    INFO(n << " hosts, width " << width);
    auto tree = plan_tree(hosts(n), width);
    std::multiset<int> nodes;
    int depth = 0;
    std::size_t max_width = 0;
    collect(tree, nodes, 1, depth, max_width);
    CHECK(nodes.size() == static_cast<std::size_t>(n));
    CHECK(std::set<int>(nodes.begin(), nodes.end()).size() == static_cast<std::size_t>(n));
    CHECK(max_width <= static_cast<std::size_t>(width));
    CHECK(depth == expected_depth);
    CHECK(tree_size(tree) == static_cast<std::size_t>(n));
    // Node order is kept: each group's first host starts the rest of its group.
    CHECK(tree.front().node == 0);
  }
}

TEST_CASE("tree: the plan survives its JSON form", "[cluster][tree]") {
  auto tree = plan_tree(hosts(50), 4);
  CHECK(tree_from_json(tree_to_json(tree)) == tree);
  CHECK_THROWS_AS(tree_from_json(nlohmann::json::parse(R"([{"node":1}])")), Error);
  CHECK_THROWS_AS(
      tree_from_json(
          nlohmann::json::parse(R"([{"node":1,"host":"a","argv":[],"args":[],"subtree":[]}])")),
      Error);
}
