#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "rendezvous/rank_assignment.hpp"

using ddprun::assign_ranks;
using ddprun::ConfigError;
using Catch::Matchers::Contains;

TEST_CASE("two nodes with 2 and 1 workers: node 1 starts at rank 2", "[agent][ranks]") {
  const auto node0 = assign_ranks({2, 1}, 0);
  CHECK(node0.group_rank == 0);
  CHECK(node0.group_world_size == 2);
  CHECK(node0.local_world_size == 2);
  CHECK(node0.base_rank == 0);
  CHECK(node0.world_size == 3);
  CHECK(node0.global_rank(0) == 0);
  CHECK(node0.global_rank(1) == 1);

  const auto node1 = assign_ranks({2, 1}, 1);
  CHECK(node1.group_rank == 1);
  CHECK(node1.group_world_size == 2);
  CHECK(node1.local_world_size == 1);
  CHECK(node1.base_rank == 2);
  CHECK(node1.world_size == 3);
  CHECK(node1.global_rank(0) == 2);
}

TEST_CASE("four nodes of sizes 1, 3, 2, 4: ranks are prefix sums in node order",
          "[agent][ranks]") {
  const std::vector<int> sizes{1, 3, 2, 4};
  const std::vector<int> expected_base{0, 1, 4, 6};
  std::vector<int> all_ranks;
  for (int g = 0; g < 4; ++g) {
    INFO("node " << g);
    const auto r = assign_ranks(sizes, g);
    CHECK(r.group_rank == g);
    CHECK(r.group_world_size == 4);
    CHECK(r.world_size == 10);
    CHECK(r.local_world_size == sizes[static_cast<std::size_t>(g)]);
    CHECK(r.base_rank == expected_base[static_cast<std::size_t>(g)]);
    for (int local = 0; local < r.local_world_size; ++local) {
      all_ranks.push_back(r.global_rank(local));
    }
  }
  // Every global rank 0..9 exactly once, in node-rank then local-rank order.
  const std::vector<int> expected{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(all_ranks == expected);
}

TEST_CASE("a single node owns every rank", "[agent][ranks]") {
  const auto r = assign_ranks({8}, 0);
  CHECK(r.group_world_size == 1);
  CHECK(r.base_rank == 0);
  CHECK(r.world_size == 8);
  CHECK(r.global_rank(7) == 7);
}

TEST_CASE("a node rank outside the job is a ConfigError naming it", "[agent][ranks]") {
  CHECK_THROWS_AS(assign_ranks({2, 1}, 2), ConfigError);
  CHECK_THROWS_WITH(assign_ranks({2, 1}, 2), Contains("node rank 2") && Contains("0..1"));
  CHECK_THROWS_AS(assign_ranks({2, 1}, -1), ConfigError);
  CHECK_THROWS_WITH(assign_ranks({2, 1}, -1), Contains("node rank -1"));
  CHECK_THROWS_AS(assign_ranks({}, 0), ConfigError);
  CHECK_THROWS_WITH(assign_ranks({}, 0), Contains("node rank 0"));
}

TEST_CASE("a node with no workers is a ConfigError naming the node and the count",
          "[agent][ranks]") {
  CHECK_THROWS_AS(assign_ranks({2, 0, 1}, 0), ConfigError);
  CHECK_THROWS_WITH(assign_ranks({2, 0, 1}, 0),
                    Contains("node 1 published 0 workers") && Contains("at least 1"));
  // The check covers every node, not only the caller's own.
  CHECK_THROWS_WITH(assign_ranks({2, 1, -3}, 0), Contains("node 2 published -3 workers"));
  CHECK_THROWS_AS(assign_ranks({0}, 0), ConfigError);
}
