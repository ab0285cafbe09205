#include <catch2/catch.hpp>

#include "store/store_state.hpp"
#include "testing/store_request.hpp"

using namespace ddprun::store;

namespace {

// Requests that block wait a second unless a test says otherwise.
Request req(Command c, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
            std::uint32_t timeout_ms = 1000) {
  return ddprun::test::make_request(c, std::move(keys), std::move(values), timeout_ms);
}

}  // namespace

TEST_CASE("store state: waiters wake only when all their keys exist", "[store]") {
  StoreState s;
  StoreState::WaiterId id = 0;
  int woken = 0;
  auto r = s.execute("run", req(Command::kWait, {"a", "b", "a"}), [&] { ++woken; }, id);
  CHECK_FALSE(r);
  CHECK(id != 0);
  CHECK(s.num_waiters() == 1);
  StoreState::WaiterId unused = 0;
  s.execute("run", req(Command::kSet, {"a"}, {"1"}), [] {}, unused);
  CHECK(woken == 0);
  s.execute("run", req(Command::kSet, {"a"}, {"2"}), [] {}, unused);  // overwrite: not new
  CHECK(woken == 0);
  s.execute("run", req(Command::kAdd, {"b"}), [] {}, unused);
  CHECK(woken == 1);
  CHECK(s.num_waiters() == 0);
  auto again = s.execute("run", req(Command::kMultiGet, {"a", "b"}), [] {}, unused);
  REQUIRE(again);
  CHECK(again->values == std::vector<std::string>{"2", "0"});
}

TEST_CASE("store state: run ids are separate namespaces", "[store]") {
  StoreState s;
  StoreState::WaiterId id = 0;
  int woken = 0;
  CHECK_FALSE(s.execute("job1", req(Command::kGet, {"k"}), [&] { ++woken; }, id));
  StoreState::WaiterId unused = 0;
  s.execute("job2", req(Command::kSet, {"k"}, {"v"}), [] {}, unused);
  CHECK(woken == 0);
  CHECK(s.num_keys("job1") == 0);
  CHECK(s.num_keys("job2") == 1);
  s.execute("job1", req(Command::kSet, {"k"}, {"v"}), [] {}, unused);
  CHECK(woken == 1);
}

TEST_CASE("store state: cancelled waiters are forgotten", "[store]") {
  StoreState s;
  StoreState::WaiterId id = 0;
  int woken = 0;
  CHECK_FALSE(s.execute("r", req(Command::kGet, {"k"}), [&] { ++woken; }, id));
  s.cancel(id);
  CHECK(s.num_waiters() == 0);
  StoreState::WaiterId unused = 0;
  s.execute("r", req(Command::kSet, {"k"}, {"v"}), [] {}, unused);
  CHECK(woken == 0);
}

TEST_CASE("store state: zero timeout never waits", "[store]") {
  StoreState s;
  StoreState::WaiterId id = 0;
  auto r = s.execute("r", req(Command::kGet, {"k"}, {}, 0), [] {}, id);
  REQUIRE(r);
  CHECK(r->status == Status::kTimeout);
  CHECK(s.num_waiters() == 0);
}

TEST_CASE("store state: an arrival counts once, the last releases, and each waits for its own key",
          "[store]") {
  StoreState s;
  StoreState::WaiterId id = 0, unused = 0;
  int woken = 0;
  // The first of two arrives and waits for the root cause.
  auto first = req(Command::kArrive, {"settled", "all_settled", "root_cause"});
  first.number = 2;
  CHECK_FALSE(s.execute("r", first, [&] { ++woken; }, id));
  CHECK(first.arrived == 1);
  CHECK_FALSE(s.execute("r", req(Command::kTryGet, {"all_settled"}), {}, unused)->status ==
              Status::kOk);
  // The second makes the count whole: it releases, and its wait (on the release) ends at once.
  auto second = req(Command::kArrive, {"settled", "all_settled", "all_settled"});
  second.number = 2;
  auto released = s.execute("r", second, [] {}, unused);
  REQUIRE(released);
  CHECK(released->number == 2);
  CHECK(released->values == std::vector<std::string>{"1"});
  CHECK(woken == 0);  // the first waits for the root cause, not the release
  s.execute("r", req(Command::kSet, {"root_cause"}, {"rank 3"}), [] {}, unused);
  CHECK(woken == 1);
  // Run again after its wake-up, the first only reads: the count stays 2.
  auto answer = s.execute("r", first, [] {}, unused);
  REQUIRE(answer);
  CHECK(answer->number == 1);
  CHECK(answer->values == std::vector<std::string>{"rank 3"});
  CHECK(s.execute("r", req(Command::kAdd, {"settled"}), [] {}, unused)->number == 2);
}
