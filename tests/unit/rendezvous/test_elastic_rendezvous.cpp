// The elastic round's pure part: who comes first and which ranks each member gets.

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "rendezvous/elastic_rendezvous.hpp"

using namespace ddprun;

namespace {

RoundCandidate candidate(int slot, const std::string& host, int nproc, int prev_rank = -1) {
  return RoundCandidate{slot, ElasticNode{host + ":1", host, nproc, prev_rank, 0}};
}

std::vector<std::string> hosts(const std::vector<RoundMember>& members) {
  std::vector<std::string> out;
  for (const auto& m : members) out.push_back(m.host);
  return out;
}

}  // namespace

TEST_CASE("order_members: newcomers in join order, ranks are prefix sums", "[rendezvous]") {
  auto m = order_members({candidate(0, "a", 2), candidate(1, "b", 1), candidate(2, "c", 3)});
  REQUIRE(m.size() == 3);
  CHECK(hosts(m) == std::vector<std::string>{"a", "b", "c"});
  CHECK(m[1].slot == 1);
  CHECK(m[1].ranks.group_rank == 1);
  CHECK(m[1].ranks.base_rank == 2);
  CHECK(m[2].ranks.base_rank == 3);
  for (const auto& member : m) {
    CHECK(member.ranks.world_size == 6);
    CHECK(member.ranks.group_world_size == 3);
  }
  CHECK(m[2].ranks.local_world_size == 3);
  // Each watches the next, the last one the first.
  CHECK(m[0].successor_host == "b");
  CHECK(m[2].successor_host == "a");
}

TEST_CASE("order_members: members of the last round keep their order, before newcomers",
          "[rendezvous]") {
  // Slots are join order in this round; c and a were group ranks 0 and 1 in the last one.
  auto m = order_members({candidate(0, "new1", 1), candidate(1, "a", 2, 1),
                          candidate(2, "c", 1, 0), candidate(3, "new2", 4)});
  CHECK(hosts(m) == std::vector<std::string>{"c", "a", "new1", "new2"});
  CHECK(m[0].ranks.base_rank == 0);
  CHECK(m[1].ranks.base_rank == 1);
  CHECK(m[2].ranks.base_rank == 3);
  CHECK(m[3].ranks.base_rank == 4);
  CHECK(m[3].ranks.world_size == 8);
  CHECK(m[3].slot == 3);
}

TEST_CASE("order_members: a gap left by a member that left keeps the others' order",
          "[rendezvous]") {
  auto m = order_members({candidate(0, "b", 1, 2), candidate(1, "a", 1, 0)});
  CHECK(hosts(m) == std::vector<std::string>{"a", "b"});
  CHECK(m[0].ranks.group_rank == 0);
  CHECK(m[1].ranks.group_rank == 1);
}

TEST_CASE("order_members: one member watches itself, none gives none", "[rendezvous]") {
  auto one = order_members({candidate(5, "solo", 2)});
  REQUIRE(one.size() == 1);
  CHECK(one[0].successor_host == "solo");
  CHECK(one[0].ranks.world_size == 2);
  CHECK(order_members({}).empty());
}

TEST_CASE("order_members: a node with no workers is refused", "[rendezvous]") {
  CHECK_THROWS_AS(order_members({candidate(0, "a", 1), candidate(1, "b", 0)}), ConfigError);
}

namespace {

// A member of round `round` (of `members`, ring of `ring`) at group rank `rank`.
RoundCandidate stayer(int slot, int rank, int round, int members, int ring) {
  ElasticNode n{"h" + std::to_string(slot) + ":1", "h" + std::to_string(slot), 1, rank, 0};
  n.prev_round = round;
  n.prev_members = members;
  n.prev_ring = ring;
  return RoundCandidate{slot, n};
}

}  // namespace

TEST_CASE("kept_ring: the same members as the last round keep its ring", "[rendezvous]") {
  // Joined in another order than their ranks: order_members gives each its old rank back.
  CHECK(kept_ring({stayer(0, 2, 5, 3, 4), stayer(1, 0, 5, 3, 4), stayer(2, 1, 5, 3, 4)}) == 4);
  const auto members = order_members({stayer(0, 2, 5, 3, 4), stayer(1, 0, 5, 3, 4),
                                      stayer(2, 1, 5, 3, 4)});
  CHECK(members[0].slot == 1);
  CHECK(members[2].slot == 0);
}

TEST_CASE("kept_ring: any other membership forms a ring of its own", "[rendezvous]") {
  // A newcomer.
  CHECK(kept_ring({stayer(0, 0, 5, 2, 5), candidate(1, "new", 1)}) == -1);
  // One member of the last round is missing.
  CHECK(kept_ring({stayer(0, 0, 5, 3, 5), stayer(1, 1, 5, 3, 5)}) == -1);
  // Members of different last rounds (one sat out as a spare), or of different rings.
  CHECK(kept_ring({stayer(0, 0, 5, 2, 5), stayer(1, 1, 4, 2, 4)}) == -1);
  CHECK(kept_ring({stayer(0, 0, 5, 2, 5), stayer(1, 1, 5, 2, 3)}) == -1);
  // Two claims on one group rank, or a rank outside the round.
  CHECK(kept_ring({stayer(0, 0, 5, 2, 5), stayer(1, 0, 5, 2, 5)}) == -1);
  CHECK(kept_ring({stayer(0, 0, 5, 2, 5), stayer(1, 2, 5, 2, 5)}) == -1);
  // One node watches nobody.
  CHECK(kept_ring({stayer(0, 0, 5, 1, 5)}) == -1);
  CHECK(kept_ring({}) == -1);
}
