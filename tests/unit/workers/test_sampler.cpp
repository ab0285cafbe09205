// The distributed sampler: DistributedSampler's contract.

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "workers/sampler.hpp"

using namespace ddprun::workers;

namespace {

std::vector<std::vector<std::size_t>> shards(std::size_t n, int world, std::uint64_t epoch,
                                             bool shuffle = true, bool drop_last = false) {
  std::vector<std::vector<std::size_t>> all;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, shuffle, /*seed=*/42, drop_last);
    s.set_epoch(epoch);
    all.push_back(s.indices());
  }
  return all;
}

}  // namespace

TEST_CASE("sampler: shards are disjoint and cover the data set", "[workers][sampler]") {
  auto all = shards(100, 4, 0);
  std::set<std::size_t> seen;
  for (const auto& shard : all) {
    CHECK(shard.size() == 25);
    for (std::size_t i : shard) {
      CHECK(i < 100);
      CHECK(seen.insert(i).second);  // no index on two ranks
    }
  }
  CHECK(seen.size() == 100);
}

TEST_CASE("sampler: every rank gets the same count, padded from the head", "[workers][sampler]") {
  auto all = shards(10, 3, 0);  // ceil(10/3) = 4 each, 2 padded
  std::multiset<std::size_t> seen;
  for (const auto& shard : all) {
    CHECK(shard.size() == 4);
    seen.insert(shard.begin(), shard.end());
  }
  CHECK(seen.size() == 12);
  for (std::size_t i = 0; i < 10; ++i) CHECK(seen.count(i) >= 1);
  DistributedSampler s(10, 3, 0, true, 42);
  CHECK(s.num_samples() == 4);
  CHECK(s.total_size() == 12);
}

TEST_CASE("sampler: a data set smaller than the world is repeated", "[workers][sampler]") {
  auto all = shards(2, 5, 0);
  for (const auto& shard : all) REQUIRE(shard.size() == 1);
}

TEST_CASE("sampler: drop_last cuts the tail instead", "[workers][sampler]") {
  auto all = shards(10, 3, 0, true, /*drop_last=*/true);
  std::set<std::size_t> seen;
  for (const auto& shard : all) {
    CHECK(shard.size() == 3);
    for (std::size_t i : shard) CHECK(seen.insert(i).second);
  }
  CHECK_THROWS_AS(DistributedSampler(2, 3, 0, true, 1, true), std::invalid_argument);
}

TEST_CASE("sampler: reshuffled per epoch, the same for the same seed and epoch", "[workers][sampler]") {
  auto e0 = shards(64, 2, 0);
  auto e1 = shards(64, 2, 1);
  CHECK(e0 != e1);
  CHECK(shards(64, 2, 1) == e1);  // deterministic: a resumed run sees the same order
  DistributedSampler other_seed(64, 2, 0, true, /*seed=*/43);
  other_seed.set_epoch(0);
  CHECK(other_seed.indices() != e0[0]);
}

TEST_CASE("sampler: without shuffle, rank r takes every world-th index from r", "[workers][sampler]") {
  auto all = shards(6, 2, 5, /*shuffle=*/false);
  CHECK(all[0] == std::vector<std::size_t>{0, 2, 4});
  CHECK(all[1] == std::vector<std::size_t>{1, 3, 5});
}

TEST_CASE("sampler: re-sharding for a new world size still covers the epoch", "[workers][sampler]") {
  // The same epoch's permutation, split 2 ways or 3 ways, visits the same samples.
  std::set<std::size_t> two, three;
  for (const auto& s : shards(60, 2, 3)) two.insert(s.begin(), s.end());
  for (const auto& s : shards(60, 3, 3)) three.insert(s.begin(), s.end());
  CHECK(two == three);
  CHECK(two.size() == 60);
}

TEST_CASE("sampler: bad arguments are rejected", "[workers][sampler]") {
  CHECK_THROWS_AS(DistributedSampler(0, 1, 0, true, 0), std::invalid_argument);
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2, true, 0), std::invalid_argument);
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0, true, 0), std::invalid_argument);
}
