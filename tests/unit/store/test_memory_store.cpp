#include <catch2/catch.hpp>

#include <future>

#include "common/error.hpp"
#include "store/memory_store.hpp"
#include "store/prefix_store.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

TEST_CASE("memory store: basic operations", "[store]") {
  store::MemoryStore s;
  auto d = Deadline::after(1s);
  s.set("a", "1", d);
  CHECK(s.get("a", d) == "1");
  CHECK(s.try_get("missing", d) == std::nullopt);
  CHECK(s.check({"a"}, d));
  CHECK_FALSE(s.check({"a", "b"}, d));
  CHECK(s.add("n", 5, d) == 5);
  CHECK(s.add("n", -2, d) == 3);
  CHECK(s.compare_set("c", "", "first", d) == "first");
  CHECK(s.compare_set("c", "", "second", d) == "first");
  CHECK(s.compare_set("c", "first", "third", d) == "third");
  s.multi_set({"x", "y"}, {"1", "2"}, d);
  CHECK(s.multi_get({"y", "x"}, d) == std::vector<std::string>{"2", "1"});
  CHECK(s.erase("x", d));
  CHECK_FALSE(s.erase("x", d));
  CHECK(s.num_keys(d) == 4);  // a, n, c, y
  s.set("text", "abc", d);
  CHECK_THROWS_WITH(s.add("text", 1, d), Catch::Contains("not an integer"));
}

TEST_CASE("memory store: an interrupted handle fails, the others go on", "[store]") {
  store::MemoryStore s;
  auto other = s.connect();
  auto blocked = std::async(std::launch::async, [&] { s.get("never", Deadline::after(30s)); });
  REQUIRE(test::wait_until([&] { return s.num_waiting() == 1; }, 30s));
  s.interrupt();
  CHECK_THROWS_AS(blocked.get(), InterruptedError);
  CHECK(s.num_waiting() == 0);  // its waiter was withdrawn
  CHECK_THROWS_AS(s.ping(Deadline::after(1s)), InterruptedError);
  other->set("k", "v", Deadline::after(1s));
  CHECK(other->get("k", Deadline::after(1s)) == "v");
}

TEST_CASE("memory store: get blocks until set, and times out naming the key", "[store]") {
  store::MemoryStore s;
  auto reader = std::async(std::launch::async, [&] { return s.get("late", Deadline::after(30s)); });
  // The reader is blocked on the missing key before anything is written.
  REQUIRE(test::wait_until([&] { return s.num_waiting() == 1; }, 30s));
  s.set("late", "here", Deadline::after(1s));
  CHECK(reader.get() == "here");
  CHECK(s.num_waiting() == 0);
  auto start = Clock::now();
  CHECK_THROWS_WITH(s.get("never", Deadline::after(100ms)), Catch::Contains("never"));
  CHECK(Clock::now() - start >= 100ms);
}

TEST_CASE("memory store: an arrival that waits is woken once and does not arrive again",
          "[store]") {
  store::MemoryStore first;
  auto other = first.connect();
  auto& second = *other;
  auto waiting = std::async(std::launch::async, [&] {
    return first.arrive("settled", 2, "all_settled", "root_cause", Deadline::after(30s));
  });
  // The first has arrived and waits for the root cause before the second arrives.
  REQUIRE(test::wait_until([&] { return first.num_waiting() == 1; }, 30s));
  const auto last = second.arrive("settled", 2, "all_settled", "all_settled", Deadline::after(5s));
  CHECK(last.count == 2);
  CHECK(last.value == "1");
  second.set("root_cause", "rank 5", Deadline::after(5s));
  REQUIRE(waiting.wait_for(30s) == std::future_status::ready);
  const auto arrival = waiting.get();
  CHECK(arrival.count == 1);
  CHECK(arrival.value == "rank 5");
  CHECK(second.add("settled", 0, Deadline::after(5s)) == 2);
  CHECK(first.num_waiting() == 0);
}

TEST_CASE("prefix store keeps namespaces apart", "[store]") {
  store::MemoryStore inner;
  store::PrefixStore a("job-a", inner);
  store::PrefixStore b("job-b", inner);
  auto d = Deadline::after(1s);
  a.set("k", "from a", d);
  b.set("k", "from b", d);
  CHECK(a.get("k", d) == "from a");
  CHECK(b.get("k", d) == "from b");
  CHECK(inner.get("job-a/k", d) == "from a");
  CHECK(a.add("n", 1, d) == 1);
  CHECK(b.add("n", 1, d) == 1);
  CHECK(a.multi_get({"k", "n"}, d) == std::vector<std::string>{"from a", "1"});
  CHECK(b.compare_set("k", "from b", "changed", d) == "changed");
  CHECK(a.check({"k"}, d));
  CHECK_FALSE(a.check({"missing"}, d));
  // An arrival's three keys are all the prefix's.
  const auto arrival = a.arrive("n", 2, "all", "all", d);
  CHECK(arrival.count == 2);
  CHECK(arrival.value == "1");
  CHECK(inner.get("job-a/all", d) == "1");
  CHECK_FALSE(b.check({"all"}, d));
}
