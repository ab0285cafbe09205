// The static rendezvous over the in-memory store: the join's single wake-up key, the start
// barrier a restart skips when every node settled the failure, and the keep-alive ring kept
// for the whole job.

#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <utility>

#include <fmt/format.h>

#include "common/error.hpp"
#include "testing/test_util.hpp"
#include "rendezvous/static_rendezvous.hpp"
#include "store/memory_store.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

namespace {

constexpr auto kHang = 30s;  // only catches hangs

StaticRendezvousOptions options(int nnodes, int node_rank, std::chrono::milliseconds join_timeout) {
  StaticRendezvousOptions o;
  o.nnodes = nnodes;
  o.node_rank = node_rank;
  o.self = NodeInfo{"host" + std::to_string(node_rank), 1, 1000 + node_rank};
  o.join_timeout = join_timeout;
  return o;
}

struct Node {
  Node(store::MemoryStore& shared, int nnodes, int rank, std::chrono::milliseconds join_timeout,
       KeepAliveTiming keep_alive = {})
      : store(shared.connect()),
        rdzv(*store,
             [&shared, this](Deadline) {
               ++opened;
               return std::unique_ptr<store::Store>(shared.connect());
             },
             options(nnodes, rank, join_timeout), "10.0.0.1", keep_alive) {}
  std::unique_ptr<store::Store> store;
  std::atomic<int> opened{0};  // connections the handler opened of its own
  StaticRendezvous rdzv;
};

// Both nodes join attempt 0; returns their rounds.
std::pair<Round, Round> join_both(Node& a, Node& b) {
  auto joined = std::async(std::launch::async, [&] { return b.rdzv.next_round(0); });
  auto first = a.rdzv.next_round(0).round;
  REQUIRE(joined.wait_for(kHang) == std::future_status::ready);
  auto second = joined.get().round;
  REQUIRE(first);
  REQUIRE(second);
  return {*first, *second};
}

std::int64_t beats(store::MemoryStore& shared, int g) {
  auto v = shared.connect()->try_get("static/hb/" + std::to_string(g), Deadline::after(kHang));
  return v && *v != kHeartbeatDone ? store::parse_counter(*v, "hb") : 0;
}

}  // namespace

TEST_CASE("static rendezvous: the nodes wake on one key, each counted once", "[rendezvous]") {
  store::MemoryStore shared;
  Node a(shared, 2, 0, kHang), b(shared, 2, 1, kHang);
  auto first = std::async(std::launch::async, [&] { return a.rdzv.next_round(0); });
  auto second = std::async(std::launch::async, [&] { return b.rdzv.next_round(0); });
  REQUIRE(first.wait_for(kHang) == std::future_status::ready);
  REQUIRE(second.wait_for(kHang) == std::future_status::ready);
  CHECK(first.get().round->ranks.world_size == 2);
  CHECK(second.get().round->hosts == std::vector<std::string>{"host0", "host1"});
  auto store = shared.connect();
  CHECK(store->get("static/all_joined", Deadline::after(kHang)) == "all");
  CHECK(store->add("static/joined", 0, Deadline::after(kHang)) == 2);
}

TEST_CASE("static rendezvous: a rank whose holder shows no sign of life is taken over, a live "
          "holder's claim ends the rendezvous for every node", "[rendezvous]") {
  store::MemoryStore shared;
  const auto fast = [](int nnodes, int rank, const std::string& token) {
    auto o = options(nnodes, rank, kHang);
    o.claim_beat = 50ms;
    o.token = token;
    return o;
  };
  const auto join = [&](StaticRendezvousOptions o) {
    return std::async(std::launch::async, [&shared, o] {
      auto store = shared.connect();
      return static_rendezvous(*store, o);
    });
  };
  SECTION("an agent killed while it waited: its record and count stay, its beats stop") {
    auto store = shared.connect();
    const auto d = Deadline::after(kHang);
    store->set("static/node/1/owner", "host1 pid 1 (dead)", d);
    store->set("static/node/1/info", R"({"host":"host1","nproc":1,"pid":1})", d);
    store->add("static/node/1/counted", 1, d);
    store->add("static/joined", 1, d);
    store->add("static/node/1/alive", 4, d);
    auto zero = join(fast(2, 0, "zero"));
    auto again = join(fast(2, 1, "again"));
    REQUIRE(again.wait_for(kHang) == std::future_status::ready);
    REQUIRE(zero.wait_for(kHang) == std::future_status::ready);
    CHECK(again.get().nodes.at(1).pid == 1001);  // its own record, not the lost one's
    CHECK(zero.get().ranks.world_size == 2);
    CHECK(store->get("static/node/1/owner", d) == "again");
  }
  SECTION("after the job formed, only a node like the lost one, and only before workers start") {
    auto store = shared.connect();
    const auto d = Deadline::after(kHang);
    store->set("static/node/1/owner", "host1 pid 1 (dead)", d);
    store->set("static/node/1/info", R"({"host":"host1","nproc":2,"pid":1})", d);
    store->set("static/all_joined", "all", d);
    auto other = join(fast(2, 1, "other"));  // one worker where the lost agent had two
    REQUIRE(other.wait_for(kHang) == std::future_status::ready);
    CHECK_THROWS_WITH(other.get(), Catch::Contains("start it with --nproc-per-node=2"));
    CHECK(store->get("static/node/1/owner", d) == "host1 pid 1 (dead)");  // not taken
    store->set("attempt/0/go", "1", d);
    auto o = fast(2, 1, "late");
    o.self.local_world_size = 2;
    auto late = join(o);
    REQUIRE(late.wait_for(kHang) == std::future_status::ready);
    CHECK_THROWS_WITH(late.get(), Catch::Contains("the job's workers have started without it"));
  }
  SECTION("a second node with a rank whose holder waits") {
    auto zero = join(fast(3, 0, "zero"));
    auto one = join(fast(3, 1, "one"));
    auto store = shared.connect();
    REQUIRE(test::wait_until(
        [&] { return store->check({"static/node/1/info"}, Deadline::after(kHang)); }, kHang));
    auto twice = join(fast(3, 1, "twice"));
    for (auto* f : {&twice, &zero, &one}) {
      REQUIRE(f->wait_for(kHang) == std::future_status::ready);
      CHECK_THROWS_WITH(f->get(), Catch::Contains("node rank 1 is already taken by one, which is "
                                                  "alive"));
    }
  }
}

TEST_CASE("static rendezvous: with progress lines off, a count filled by a node lost before it "
          "woke the others is still repaired", "[rendezvous]") {
  store::MemoryStore shared;
  auto o = options(2, 0, 25s);
  o.claim_beat = 50ms;
  o.progress_interval = 0ms;  // --progress-interval 0
  auto zero = std::async(std::launch::async, [&shared, o] {
    auto store = shared.connect();
    return static_rendezvous(*store, o);
  });
  auto store = shared.connect();
  const auto d = Deadline::after(kHang);
  REQUIRE(test::wait_until([&] { return store->add("static/joined", 0, d) == 1; }, kHang));
  // Node 1 joins and fills the count, then is lost before it sets the key that wakes node 0.
  store->set("static/node/1/owner", "host1 pid 1 (lost)", d);
  store->set("static/node/1/info", R"({"host":"host1","nproc":1,"pid":1})", d);
  store->add("static/node/1/counted", 1, d);
  store->add("static/joined", 1, d);
  REQUIRE(zero.wait_for(kHang) == std::future_status::ready);
  const auto joined = zero.get();  // before its 25 s join timeout
  CHECK(joined.ranks.world_size == 2);
  CHECK(joined.nodes.at(1).pid == 1);
}

TEST_CASE("static rendezvous: a start barrier whose last arrival was lost before it opened the "
          "gate is opened by a node waiting there", "[rendezvous]") {
  store::MemoryStore shared;
  Node a(shared, 2, 0, 25s), b(shared, 2, 1, 25s);
  const auto round0 = join_both(a, b).first;
  // The failure was not settled by every node: both come to attempt 1's barrier.
  a.rdzv.round_ended(round0, RoundEnd{false, false, std::nullopt, std::nullopt});
  auto next = std::async(std::launch::async, [&] { return a.rdzv.next_round(1); });
  auto store = shared.connect();
  const auto d = Deadline::after(kHang);
  REQUIRE(test::wait_until([&] { return store->add("attempt/1/arrived", 0, d) == 1; }, kHang));
  // Node 1 arrives, completing the count, and is lost before it opens the gate.
  store->add("attempt/1/node/1/arrived", 1, d);
  store->add("attempt/1/arrived", 1, d);
  REQUIRE(next.wait_for(kHang) == std::future_status::ready);
  const auto round1 = next.get().round;  // before its 25 s join timeout
  REQUIRE(round1);
  CHECK(round1->prefix == "attempt/1");
  CHECK(store->check({"attempt/1/go"}, d));
}

TEST_CASE("static rendezvous: a restart every node settled does not wait at the start barrier",
          "[rendezvous]") {
  store::MemoryStore shared;
  // A node that waits at a barrier nobody else reaches fails after this.
  Node a(shared, 2, 0, 2s), b(shared, 2, 1, 2s);
  const auto round0 = join_both(a, b).first;

  // Node 1 never comes back. With every node settled, node 0 goes on at once, and counts
  // itself nowhere.
  a.rdzv.round_ended(round0, RoundEnd{true, false, std::nullopt, std::nullopt});
  auto round1 = a.rdzv.next_round(1).round;
  REQUIRE(round1);
  CHECK(round1->prefix == "attempt/1");
  CHECK(shared.connect()->add("attempt/1/arrived", 0, Deadline::after(kHang)) == 0);

  // Without it, node 0 waits for node 1 at the barrier, and says which attempt it waited for.
  a.rdzv.round_ended(*round1, RoundEnd{false, false, std::nullopt, std::nullopt});
  CHECK_THROWS_WITH(a.rdzv.next_round(2),
                    Catch::Contains("attempt 2: not every node came back to start workers"));
}

TEST_CASE("static rendezvous: a node that missed the root cause passes the gate its chooser opened",
          "[rendezvous]") {
  store::MemoryStore shared;
  Node a(shared, 2, 0, 2s), b(shared, 2, 1, 2s);
  const auto [round0, round0_b] = join_both(a, b);

  // Node 0 chose the root cause with every node settled; node 1's read of it timed out, so it
  // waits at the next attempt's barrier, where node 0 does not count itself.
  a.rdzv.round_ended(round0, RoundEnd{true, true, std::nullopt, std::nullopt});
  REQUIRE(a.rdzv.next_round(1).round);
  b.rdzv.round_ended(round0_b, RoundEnd{false, false, std::nullopt, std::nullopt});
  auto round1_b = b.rdzv.next_round(1).round;
  REQUIRE(round1_b);
  CHECK(round1_b->prefix == "attempt/1");
  CHECK(shared.connect()->add("attempt/1/arrived", 0, Deadline::after(kHang)) == 1);

  // A node that settled but did not choose opens nothing: the gate of attempt 2 stays shut.
  b.rdzv.round_ended(*round1_b, RoundEnd{true, false, std::nullopt, std::nullopt});
  CHECK(!shared.connect()->check({"attempt/2/go"}, Deadline::after(kHang)));
}

TEST_CASE("static rendezvous: one keep-alive ring for every attempt, marked when leaving early",
          "[rendezvous]") {
  store::MemoryStore shared;
  const KeepAliveTiming timing{20ms, 100'000, 5s};  // node 1 never beats: a silence no test outlasts
  Node a(shared, 2, 0, kHang, timing), b(shared, 2, 1, kHang, timing);
  auto round = join_both(a, b).first;
  std::atomic<int> reports{0};
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto watch = a.rdzv.keep_alive(round, [&](int) { ++reports; }, [&](std::string) { ++reports; });
    REQUIRE(watch);
    // The ring beats under the job's keys, on the one connection it opened.
    const auto before = beats(shared, 0);
    REQUIRE(test::wait_until([&] { return beats(shared, 0) > before; }, kHang));
    watch.reset();
    a.rdzv.round_ended(round, RoundEnd{true, false, std::nullopt, std::nullopt});
    round.prefix = fmt::format("attempt/{}", attempt + 1);
  }
  CHECK(a.opened == 1);
  CHECK(!shared.connect()->check({"attempt/1/hb/0"}, Deadline::after(kHang)));

  // Leaving early stops the ring first, so that no beat overwrites the mark.
  a.rdzv.leave_early(round);
  CHECK(shared.connect()->get("static/hb/0", Deadline::after(kHang)) == kHeartbeatDone);
  CHECK(reports == 0);
}
