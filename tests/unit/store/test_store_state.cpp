#include <catch2/catch.hpp>

#include "store/store_state.hpp"

using namespace ddprun::store;

namespace {

Request req(Command c, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
            std::uint32_t timeout_ms = 1000) {
  Request r;
  r.command = c;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.timeout_ms = timeout_ms;
  return r;
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
