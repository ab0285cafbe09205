// The ring keep-alive on the in-memory store. Nothing here sleeps: "nothing happened" is
// asserted only after the heartbeat has shown progress past the point where it would have
// happened (its own counter, bumped once per interval), and liveness gets a silence allowance
// that a busy machine cannot starve.

#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>

#include "rendezvous/heartbeat.hpp"
#include "store/memory_store.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

namespace {

constexpr auto kHang = 30s;  // only catches hangs

HeartbeatOptions options(int group_rank, int members, std::chrono::milliseconds interval,
                         int max_attempts) {
  HeartbeatOptions o;
  o.prefix = "r/0";
  o.group_rank = group_rank;
  o.members = members;
  o.timing = KeepAliveTiming{interval, max_attempts, 5s};
  return o;
}

// How many times member `g` has beaten (each beat is followed by checks of its successor).
std::int64_t beats(store::MemoryStore& store, int g) {
  auto v = store.try_get("r/0/hb/" + std::to_string(g), Deadline::after(kHang));
  return v && *v != kHeartbeatDone ? store::parse_counter(*v, "hb") : 0;
}

// Waits until member `g` has beaten `n` more times than now.
bool beats_more(store::MemoryStore& store, int g, int n) {
  const auto target = beats(store, g) + n;
  return test::wait_until([&] { return beats(store, g) >= target; }, kHang);
}

// Opens connections to `store`, counting them in `opened`.
store::StoreOpener counting_opener(store::MemoryStore& store, std::atomic<int>& opened) {
  return [&store, &opened](Deadline) {
    ++opened;
    return store.connect();
  };
}

}  // namespace

TEST_CASE("heartbeat: a silent successor is declared dead once", "[heartbeat]") {
  store::MemoryStore store;
  std::atomic<int> dead{-1};
  std::atomic<int> calls{0};
  Heartbeat hb(store.connect(), options(2, 3, 20ms, 3), [&](int g) { dead = g; ++calls; },
               [](std::string) {});
  REQUIRE(test::wait_until([&] { return dead.load() == 0; }, kHang));  // 2 watches 0
  // Ten more checks of the silent successor: still reported only once.
  REQUIRE(beats_more(store, 2, 10));
  CHECK(calls == 1);
}

TEST_CASE("heartbeat: silence is time since the last change, never less than the deadline",
          "[heartbeat]") {
  store::MemoryStore store;
  std::atomic<bool> dead{false};
  // Member 1 watches member 0, whose counter the test sets once: from that moment on it is
  // silent. The deadline is 3 intervals of time (300 ms) from the watcher's start.
  store.set("r/0/hb/0", "1", Deadline::after(kHang));
  const auto last_beat = std::chrono::steady_clock::now();
  Heartbeat hb(store.connect(), options(1, 2, 100ms, 3), [&](int) { dead = true; },
               [](std::string) {});
  REQUIRE(test::wait_until([&] { return dead.load(); }, kHang));
  CHECK(std::chrono::steady_clock::now() - last_beat >= 300ms);
}

TEST_CASE("heartbeat: a beating successor is alive", "[heartbeat]") {
  store::MemoryStore store;
  std::atomic<int> calls{0};
  // 40 intervals of silence before death (2 s): far beyond what a busy machine starves a thread.
  Heartbeat a(store.connect(), options(0, 2, 50ms, 40), [&](int) { ++calls; }, [](std::string) {});
  Heartbeat b(store.connect(), options(1, 2, 50ms, 40), [&](int) { ++calls; }, [](std::string) {});
  // More beats than the death threshold on both sides.
  REQUIRE(beats_more(store, 0, 60));
  REQUIRE(beats_more(store, 1, 1));
  CHECK(calls == 0);
}

TEST_CASE("heartbeat: a ring started again on the same keys counts on from its counter",
          "[heartbeat]") {
  store::MemoryStore store;
  store.set("r/0/hb/0", "7", Deadline::after(kHang));
  // It beats at once, and not again for a minute.
  Heartbeat hb(store.connect(), options(0, 2, 60s, 100), [](int) {}, [](std::string) {});
  REQUIRE(test::wait_until([&] { return beats(store, 0) >= 8; }, kHang));
  CHECK(beats(store, 0) == 8);
  CHECK(store.check({"r/0/hb/0/8"}, Deadline::after(kHang)));
}

TEST_CASE("heartbeat: a beat bumps the counter and keeps the last two wake-up keys",
          "[heartbeat]") {
  store::MemoryStore store;
  for (std::int64_t n = 1; n <= 5; ++n) beat(store, "r/0/hb/3", n, Deadline::after(kHang));
  CHECK(store.get("r/0/hb/3", Deadline::after(kHang)) == "5");
  CHECK(beats(store, 3) == 5);
  CHECK(store.check({"r/0/hb/3/4", "r/0/hb/3/5"}, Deadline::after(kHang)));
  for (const char* gone : {"r/0/hb/3/1", "r/0/hb/3/2", "r/0/hb/3/3"}) {
    CHECK_FALSE(store.check({gone}, Deadline::after(kHang)));
  }
}

TEST_CASE("heartbeat: a watcher whose wake-up keys are gone catches up from the counter",
          "[heartbeat]") {
  store::MemoryStore store;
  std::atomic<int> calls{0};
  // Member 1 watches member 0, which the test plays: it bumps the counter but never makes the
  // wake-up keys (as if the watcher had fallen behind and they were erased), so only the
  // counter read at each deadline (120 intervals, 3 s) keeps member 0 alive. The test bumps it
  // every 12 of the watcher's beats (0.3 s): a tenth of the allowance, so a busy machine that
  // holds this thread back for a while does not make member 0 look dead.
  Heartbeat watcher(store.connect(), options(1, 2, 25ms, 120), [&](int) { ++calls; },
                    [](std::string) {});
  for (int i = 0; i < 30; ++i) {  // 30 x 12 of the watcher's beats: 9 s, three deadlines
    store.add("r/0/hb/0", 1, Deadline::after(kHang));
    REQUIRE(beats_more(store, 1, 12));
  }
  CHECK(calls == 0);
  REQUIRE(test::wait_until([&] { return calls.load() == 1; }, kHang));  // silent from now on
}

TEST_CASE("heartbeat: a member that left on purpose is not dead", "[heartbeat]") {
  store::MemoryStore store;
  store.set("r/0/hb/1", kHeartbeatDone, Deadline::after(kHang));
  std::atomic<int> calls{0};
  Heartbeat a(store.connect(), options(0, 2, 20ms, 3), [&](int) { ++calls; }, [](std::string) {});
  REQUIRE(beats_more(store, 0, 10));  // more than 3 checks of the departed member
  CHECK(calls == 0);
}

TEST_CASE("heartbeat: a store error is reported once, with the store's message",
          "[heartbeat]") {
  store::MemoryStore store;
  store.set("r/0/hb/0", "not a counter", Deadline::after(kHang));  // its own beat fails
  std::mutex mutex;
  std::vector<std::string> errors;
  Heartbeat a(store.connect(), options(0, 2, 20ms, 3), [](int) {}, [&](std::string message) {
    std::lock_guard lock(mutex);
    errors.push_back(std::move(message));
  });
  REQUIRE(test::wait_until([&] {
    std::lock_guard lock(mutex);
    return !errors.empty();
  }, kHang));
  std::lock_guard lock(mutex);
  CHECK(errors.size() == 1);
  CHECK_THAT(errors[0], Catch::Contains("r/0/hb/0") && Catch::Contains("not an integer"));
}

TEST_CASE("heartbeat: an interrupted store stops it quietly, and destruction does not hang",
          "[heartbeat]") {
  store::MemoryStore store;
  auto handle = store.connect();
  handle->interrupt();  // every call on it now throws InterruptedError, as on stop
  std::atomic<int> errors{0};
  {
    Heartbeat a(std::move(handle), options(0, 2, 20ms, 3), [](int) {},
                [&](std::string) { ++errors; });
  }
  // An interrupted store means "stop", not "error": the heartbeat ended without reporting.
  CHECK(errors == 0);
  CHECK(beats(store, 0) == 0);
}

TEST_CASE("standing ring: one connection for every attempt, beating between them",
          "[heartbeat]") {
  store::MemoryStore store;
  std::atomic<int> opened{0};
  const auto open = counting_opener(store, opened);
  // The watched member beat once; the silence allowed (20 ms x 100,000) outlasts any test.
  store.add("r/0/hb/1", 1, Deadline::after(kHang));
  StandingRing ring(open, options(0, 2, 20ms, 100'000));
  std::atomic<int> calls{0};
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto handle = ring.attach([&](int) { ++calls; }, [&](std::string) { ++calls; });
    REQUIRE(beats_more(store, 0, 2));
    handle.reset();
    REQUIRE(beats_more(store, 0, 2));  // no attempt attached: the ring goes on
  }
  CHECK(opened == 1);
  CHECK(calls == 0);
}

TEST_CASE("standing ring: a death seen between attempts is found again by the next attempt's ring",
          "[heartbeat]") {
  store::MemoryStore store;
  std::atomic<int> opened{0};
  store.add("r/0/hb/1", 1, Deadline::after(kHang));  // one beat, then silence
  StandingRing ring(counting_opener(store, opened), options(0, 2, 20ms, 3));
  // No attempt is attached while the ring beats alone for far more than the three intervals
  // of silence after which it declares member 1 dead (the same thread does both): that report
  // is not kept (it could be stale), and the next attempt's ring, formed again on the same
  // keys, declares member 1 dead by itself.
  REQUIRE(beats_more(store, 0, 20));
  std::atomic<int> lost{0};
  std::atomic<int> lost_rank{-1};
  auto next = ring.attach(
      [&](int g) {
        lost_rank = g;
        ++lost;
      },
      [](std::string) {});
  CHECK(opened == 2);
  REQUIRE(test::wait_until([&] { return lost.load() == 1; }, kHang));
  CHECK(lost_rank == 1);
  REQUIRE(beats_more(store, 0, 10));  // reported once
  CHECK(lost == 1);
}

TEST_CASE("ring keeper: the same ring is kept, another is formed, leaving marks the ring's keys",
          "[heartbeat]") {
  store::MemoryStore store;
  std::atomic<int> opened{0};
  const auto open = counting_opener(store, opened);
  const KeepAliveTiming timing{20ms, 100'000, 5s};
  Round round;
  round.prefix = "r/0";
  round.ranks.group_rank = 0;
  round.ranks.group_world_size = 2;
  RingKeeper keeper;
  auto attached = keeper.attach(open, round, timing, [](int) {}, [](std::string) {});
  attached.reset();
  round.prefix = "r/1";
  round.ring_prefix = "r/0";  // round 1 keeps round 0's ring
  attached = keeper.attach(open, round, timing, [](int) {}, [](std::string) {});
  CHECK(opened == 1);
  attached.reset();
  round.ring_prefix.clear();  // round 1 forms its own
  attached = keeper.attach(open, round, timing, [](int) {}, [](std::string) {});
  CHECK(opened == 2);
  const auto before = store.add("r/1/hb/0", 0, Deadline::after(kHang));
  REQUIRE(test::wait_until(
      [&] { return store.add("r/1/hb/0", 0, Deadline::after(kHang)) > before; }, kHang));
  attached.reset();
  round.ranks.group_world_size = 1;  // alone: nobody to watch, and no ring left beating
  CHECK(keeper.attach(open, round, timing, [](int) {}, [](std::string) {}) == nullptr);

  round.ranks.group_world_size = 2;
  round.ring_prefix = "r/0";
  keeper.stop();
  mark_left_on_purpose(store, round, Deadline::after(kHang));
  CHECK(store.get("r/0/hb/0", Deadline::after(kHang)) == kHeartbeatDone);
  CHECK(store.try_get("r/1/hb/0", Deadline::after(kHang)) != kHeartbeatDone);
}

TEST_CASE("standing ring: after a store error the next attempt gets a ring on a fresh connection",
          "[heartbeat]") {
  store::MemoryStore store;
  std::atomic<int> opened{0};
  store.set("r/0/hb/0", "not a counter", Deadline::after(kHang));  // its own beat fails
  StandingRing ring(counting_opener(store, opened), options(0, 2, 20ms, 100'000));
  std::atomic<int> errors{0};
  auto first = ring.attach([](int) {}, [&](std::string) { ++errors; });
  // Reported to this attempt, or between (then dropped, and the ring formed again here fails
  // the same way while attached).
  REQUIRE(test::wait_until([&] { return errors.load() >= 1; }, kHang));
  first.reset();
  store.erase("r/0/hb/0", Deadline::after(kHang));  // the store is fine again
  const int before = opened;
  auto second = ring.attach([](int) {}, [&](std::string) { ++errors; });
  CHECK(opened == before + 1);
  REQUIRE(beats_more(store, 0, 3));
  const int seen = errors;
  REQUIRE(beats_more(store, 0, 3));
  CHECK(errors == seen);
}

TEST_CASE("ring listeners: reports reach the attempt attached, a spent watch takes no attempt",
          "[heartbeat]") {
  std::vector<int> lost;
  std::vector<std::string> errors;
  const RendezvousHandler::LostCallback on_lost = [&](int g) { lost.push_back(g); };
  const RendezvousHandler::ErrorCallback on_error = [&](std::string m) { errors.push_back(m); };

  SECTION("a death goes to the attempt attached, and the watch is spent") {
    RingListeners l;
    REQUIRE(l.attach(on_lost, on_error));
    l.lost(3);
    CHECK(lost == std::vector<int>{3});
    CHECK_FALSE(l.attach(on_lost, on_error));
  }
  SECTION("a report while detached reaches nobody, and still spends the watch") {
    RingListeners l;
    const auto attached = l.attach(on_lost, on_error);
    REQUIRE(attached);
    l.detach(*attached);
    l.error("the store went away");
    CHECK(errors.empty());
    CHECK_FALSE(l.attach(on_lost, on_error));
  }
  SECTION("an earlier attempt's handle let go after the next attach does not silence it") {
    RingListeners l;
    const auto first = l.attach(on_lost, on_error);
    const auto second = l.attach(on_lost, on_error);
    REQUIRE(first);
    REQUIRE(second);
    l.detach(*first);
    l.lost(1);
    CHECK(lost == std::vector<int>{1});
  }
  SECTION("a watched member that left on purpose ends the watch without a report") {
    RingListeners l;
    REQUIRE(l.attach(on_lost, on_error));
    l.ended();
    CHECK(lost.empty());
    CHECK(errors.empty());
    CHECK_FALSE(l.attach(on_lost, on_error));
  }
}
