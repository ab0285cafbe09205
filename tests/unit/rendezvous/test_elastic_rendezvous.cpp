// The elastic round's pure part (who comes first and which ranks each member gets), and one
// round joined over the in-memory store.

#include <catch2/catch.hpp>

#include <future>
#include <utility>

#include "common/error.hpp"
#include "rendezvous/elastic_rendezvous.hpp"
#include "rendezvous/round_records.hpp"
#include "store/memory_store.hpp"
#include "testing/test_util.hpp"

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

TEST_CASE("join_round: the last round's members keep their places without reading them",
          "[rendezvous]") {
  store::MemoryStore shared;
  ElasticRendezvousOptions o;
  o.min_nodes = 2;
  o.max_nodes = 2;
  o.join_timeout = std::chrono::seconds(30);
  const auto join_both = [&](int round, const ElasticNode& a, const ElasticNode& b,
                             const std::optional<RoundAssignment>& prev_a,
                             const std::optional<RoundAssignment>& prev_b) {
    auto sa = shared.connect();
    auto sb = shared.connect();
    auto ja = std::async(std::launch::async, [&] { return join_round(*sa, round, a, o, prev_a); });
    auto jb = std::async(std::launch::async, [&] { return join_round(*sb, round, b, o, prev_b); });
    REQUIRE(ja.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    REQUIRE(jb.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    return std::pair{ja.get(), jb.get()};
  };
  ElasticNode a{"a:1", "a", 2, -1, 0}, b{"b:1", "b", 1, -1, 0};
  auto [a0, b0] = join_both(0, a, b, std::nullopt, std::nullopt);
  REQUIRE(a0.member);
  REQUIRE(b0.member);
  CHECK(!a0.ranks_kept);

  // Both were members of round 0, at different group ranks: round 1 keeps every place. The
  // places each node remembers are marked (a successor no closer would write), so that the
  // result shows they were not read from the store.
  for (auto* n : {&a, &b}) {
    const auto& r = n == &a ? a0 : b0;
    n->prev_rank = r.ranks.group_rank;
    n->prev_round = 0;
    n->prev_members = 2;
    n->prev_ring = 0;
  }
  const RoundAssignment kept_a{a0.ranks.group_rank, a0.ranks.base_rank, "remembered-a"};
  const RoundAssignment kept_b{b0.ranks.group_rank, b0.ranks.base_rank, "remembered-b"};
  auto [a1, b1] = join_both(1, a, b, kept_a, kept_b);
  const auto closed = decode_closed(shared.connect()->get("news/r/1/closed",
                                                          Deadline::after(std::chrono::seconds(5))));
  CHECK(closed.ring_round == 0);
  CHECK(closed.ranks_of == 0);
  REQUIRE(a1.member);
  REQUIRE(b1.member);
  CHECK(a1.ranks_kept);
  CHECK(b1.ranks_kept);
  CHECK(a1.successor_host == "remembered-a");
  CHECK(b1.successor_host == "remembered-b");
  CHECK(a1.ranks.group_rank == a0.ranks.group_rank);
  CHECK(b1.ranks.base_rank == b0.ranks.base_rank);
  CHECK(a1.ranks.world_size == 3);
  CHECK(a1.ring_round == 0);

  // Members of different last rounds (b missed round 1): the round keeps nothing, and every
  // node reads its place.
  a.prev_round = 1;
  auto [a2, b2] = join_both(2, a, b, kept_a, kept_b);
  CHECK(decode_closed(shared.connect()->get("news/r/2/closed",
                                            Deadline::after(std::chrono::seconds(5))))
            .ranks_of == -1);
  CHECK(!a2.ranks_kept);
  CHECK(!b2.ranks_kept);
  CHECK(b2.successor_host == "a");
  CHECK(b2.ranks.group_rank == b0.ranks.group_rank);
}

namespace {

// Round 0's two members, with the ranks and the ring they had there (world size 3).
ClosedRound same_two_members() {
  ClosedRound next;
  next.members = 2;
  next.world_size = 3;
  next.failures = 1;
  next.master_host = "a";
  next.ring_round = 0;
  next.ranks_of = 0;
  return next;
}

}  // namespace

TEST_CASE("settle_next_round: the members take the next round's places, a latecomer is left out",
          "[rendezvous]") {
  store::MemoryStore shared;
  auto s = shared.connect();
  const auto op = [] { return Deadline::after(std::chrono::seconds(5)); };
  // Round 0 formed with two members.
  s->set("round", "0", op());
  s->add("r/0/join", 2, op());
  auto next = same_two_members();
  const auto settled = settle_next_round(*s, 0, next, 2, op());
  REQUIRE(settled);
  CHECK(settled->round == 1);
  const auto carried = decode_settled(encode_settled(*settled));
  CHECK(carried.round == 1);
  CHECK(carried.closed.failures == 1);
  CHECK(carried.closed.ranks_of == 0);
  // The store says the same to a node that reads the round instead of the root cause, and the
  // claim holds the record.
  CHECK(s->get("round", op()) == "1");
  CHECK(decode_closed(s->get("news/r/1/closed", op())).world_size == 3);
  CHECK(decode_settled(s->get("r/1/closing", op())).round == 1);
  CHECK(!s->check({"r/1/join"}, op()));

  // A newcomer joining round 1 now finds no place of its own in it.
  ElasticRendezvousOptions o;
  o.min_nodes = 1;
  o.max_nodes = 3;
  o.join_timeout = std::chrono::seconds(30);
  o.last_call_timeout = std::chrono::milliseconds(1);
  const ElasticNode c{"c:1", "c", 1, -1, 0};
  const auto late = join_round(*shared.connect(), 1, c, o);
  CHECK(!late.member);
  CHECK(late.members == 2);

  // Round 1 was closed ahead, so its members took no joins: the newcomer's one makes the next
  // round form as usual; without it, round 2 is closed ahead too.
  next.ranks_of = 1;
  CHECK(!settle_next_round(*s, 1, next, 0, op()));
  s->add("r/1/join", -1, op());
  const auto again = settle_next_round(*s, 1, next, 0, op());
  REQUIRE(again);
  CHECK(again->round == 2);
  CHECK(s->get("round", op()) == "2");
}

TEST_CASE("settle_next_round: a node waiting to join, or a joiner's claim, makes the round form",
          "[rendezvous]") {
  store::MemoryStore shared;
  auto s = shared.connect();
  const auto op = [] { return Deadline::after(std::chrono::seconds(5)); };
  const auto next = same_two_members();
  s->set("round", "0", op());

  // Round 0 has two members and took a third join (a latecomer, a hot spare): nothing closes.
  s->add("r/0/join", 3, op());
  CHECK(!settle_next_round(*s, 0, next, 2, op()));
  // Round 0 took two, but a joiner claimed round 1 first.
  s->add("r/0/join", -1, op());
  s->compare_set("r/1/closing", "", "c:1", op());
  CHECK(!settle_next_round(*s, 0, next, 2, op()));
  // Either way the next round is left to form: nothing of it was written.
  CHECK(s->get("round", op()) == "0");
  CHECK(!s->check({"news/r/1/closed"}, op()));
  CHECK(s->get("r/1/closing", op()) == "c:1");

  // The joiner's claim was taken over and given back, but the joiner, only slow, still
  // published its record: the chooser claims the round and finds that record, which stays the
  // round's (nodes may have read it), and the round number is left to those who run it.
  s->set("r/1/closing", "", op());
  ClosedRound joiners = next;
  joiners.members = 3;
  joiners.closer = "c:1";
  s->set("news/r/1/closed", encode_closed(joiners), op());
  CHECK(!settle_next_round(*s, 0, next, 2, op()));
  CHECK(decode_closed(s->get("news/r/1/closed", op())).closer == "c:1");
  CHECK(decode_closed(s->get("news/r/1/closed", op())).members == 3);
  CHECK(s->get("round", op()) == "0");
}

TEST_CASE("join_round: a round closed ahead but never published is published by a joiner, "
          "with progress lines on or off", "[rendezvous]") {
  store::MemoryStore shared;
  auto s = shared.connect();
  const auto op = [] { return Deadline::after(std::chrono::seconds(5)); };
  // The chooser claimed round 1 and stopped before publishing it.
  s->set("round", "0", op());
  s->set("r/1/closing", encode_settled({1, same_two_members()}), op());

  // A member that missed the root cause joins round 1: nobody can close it, so the joiner
  // publishes the claimed record at its first repair and keeps its place, before its join
  // timeout. Repairs follow progress lines, and go on when those are off (0: every 10 s).
  ElasticRendezvousOptions o;
  o.min_nodes = 2;
  o.max_nodes = 2;
  o.join_timeout = std::chrono::seconds(25);
  o.progress_interval = GENERATE(std::chrono::milliseconds(20), std::chrono::milliseconds(0));
  ElasticNode b{"b:1", "b", 1, 1, 1, 0, 2, 0};
  const RoundAssignment kept_b{1, 1, "a"};
  const auto r = join_round(*shared.connect(), 1, b, o, kept_b);
  REQUIRE(r.member);
  CHECK(r.ranks_kept);
  CHECK(r.ranks.group_rank == 1);
  CHECK(s->get("round", op()) == "1");
  CHECK(decode_closed(s->get("news/r/1/closed", op())).members == 2);
}

TEST_CASE("join_round: a claim to close the round left by a closer lost half-way is taken "
          "over, and what that closer wrote is not read", "[rendezvous]") {
  store::MemoryStore shared;
  auto s = shared.connect();
  const auto op = [] { return Deadline::after(std::chrono::seconds(5)); };
  // A closer claimed round 0, wrote one assignment and was lost.
  s->set(round_key(0, "closing"), "lost:1#1", op());
  s->set(round_key(0, "assign/lost:1#1/0"), encode_assignment({5, 50, "nowhere"}), op());
  ElasticRendezvousOptions o;
  o.min_nodes = 2;
  o.max_nodes = 2;
  o.join_timeout = std::chrono::seconds(25);
  o.claim_stale_after = std::chrono::milliseconds(400);
  ElasticNode a{"a:1", "a", 1};
  ElasticNode b{"b:1", "b", 1};
  auto ja = std::async(std::launch::async, [&] { return join_round(*shared.connect(), 0, a, o); });
  REQUIRE(ddprun::test::wait_until(
      [&] { return s->add(round_key(0, "join"), 0, op()) == 1; }, std::chrono::seconds(20)));
  const auto rb = join_round(*shared.connect(), 0, b, o);  // before its 25 s join timeout
  const auto ra = ja.get();
  REQUIRE(ra.member);
  REQUIRE(rb.member);
  CHECK(ra.ranks.world_size == 2);
  CHECK(ra.ranks.group_rank + rb.ranks.group_rank == 1);  // 0 and 1, none of the lost one's
  const auto closer = decode_closed(s->get(news_key(0, "closed"), op())).closer;
  CHECK((closer.starts_with("a:1#") || closer.starts_with("b:1#")));
}

TEST_CASE("join_round: a round never closes under its minimum: a slot taken without its node "
          "published yet is waited for", "[rendezvous]") {
  store::MemoryStore shared;
  auto s = shared.connect();
  const auto op = [] { return Deadline::after(std::chrono::seconds(5)); };
  // Slot 0 is taken by a joiner that has not published its node yet (a busy machine).
  s->add(round_key(0, "join"), 1, op());
  ElasticRendezvousOptions o;
  o.min_nodes = 2;
  o.max_nodes = 2;
  o.join_timeout = std::chrono::seconds(60);
  o.read_timeout = std::chrono::milliseconds(200);  // the closer's first look at the slots
  ElasticNode b{"b:1", "b", 1};
  auto joined =
      std::async(std::launch::async, [&] { return join_round(*shared.connect(), 0, b, o); });
  // b takes the last slot and claims the closing; well past its first look at the slots, the
  // round is still open, waiting for slot 0...
  REQUIRE(ddprun::test::wait_until([&] { return s->check({round_key(0, "closing")}, op()); },
                                   std::chrono::seconds(30)));
  CHECK_FALSE(ddprun::test::wait_until(
      [&] { return s->check({news_key(0, "closed")}, op()); }, std::chrono::seconds(2)));
  // ...which comes: the round closes with both.
  s->set(round_key(0, "node/0"), encode_node(ElasticNode{"a:1", "a", 2}), op());
  const auto r = joined.get();
  REQUIRE(r.member);
  CHECK(r.members == 2);
  CHECK(r.ranks.world_size == 3);
}

TEST_CASE("join_round: a dead slot is left out once enough others have published their nodes",
          "[rendezvous]") {
  store::MemoryStore shared;
  auto s = shared.connect();
  const auto op = [] { return Deadline::after(std::chrono::seconds(5)); };
  s->add(round_key(0, "join"), 1, op());  // slot 0: a joiner that died before its node
  ElasticRendezvousOptions o;
  o.min_nodes = 2;
  o.max_nodes = 3;
  o.join_timeout = std::chrono::seconds(60);
  o.last_call_timeout = std::chrono::milliseconds(100);
  o.read_timeout = std::chrono::milliseconds(200);
  // b (slot 1) closes after the last call, finds one node, and tries again as c joins.
  ElasticNode b{"b:1", "b", 1};
  auto jb = std::async(std::launch::async, [&] { return join_round(*shared.connect(), 0, b, o); });
  REQUIRE(ddprun::test::wait_until([&] { return s->check({round_key(0, "closing")}, op()); },
                                   std::chrono::seconds(30)));
  ElasticNode c{"c:1", "c", 1};
  const auto rc = join_round(*shared.connect(), 0, c, o);
  const auto rb = jb.get();
  REQUIRE(rb.member);
  REQUIRE(rc.member);
  CHECK(rb.members == 2);
  CHECK(rb.ranks.world_size == 2);
}

TEST_CASE("join_round: a slot whose node never comes leaves the round unclosed at the join "
          "timeout, not closed under its minimum", "[rendezvous]") {
  store::MemoryStore shared;
  auto s = shared.connect();
  const auto op = [] { return Deadline::after(std::chrono::seconds(5)); };
  s->add(round_key(0, "join"), 1, op());  // a joiner that died after taking slot 0
  ElasticRendezvousOptions o;
  o.min_nodes = 2;
  o.max_nodes = 2;
  o.join_timeout = std::chrono::seconds(1);
  o.read_timeout = std::chrono::milliseconds(200);
  ElasticNode b{"b:1", "b", 1};
  CHECK_THROWS_AS(join_round(*shared.connect(), 0, b, o), TimeoutError);
  CHECK_FALSE(s->check({news_key(0, "closed")}, op()));
  CHECK(s->get(round_key(0, "closing"), op()).empty());  // the claim went back
}
