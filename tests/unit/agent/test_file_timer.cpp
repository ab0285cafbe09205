// The FileTimer protocol of torch.distributed.elastic.timer: request lines, the table of timers
// (pure), and the server on a real FIFO fed the way FileTimerClient writes to it.

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <atomic>
#include <fstream>
#include <unistd.h>

#include <fmt/format.h>

#include "agent/file_timer.hpp"
#include "common/failure_record.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

TEST_CASE("file timer: request lines as FileTimerClient writes them", "[agent][timer]") {
  auto r = parse_timer_request(
      R"({"version": 1, "pid": 123, "scope_id": "train.py#88", "expiration_time": 1700000000.5, "signal": 9})");
  REQUIRE(r);
  CHECK(r->pid == 123);
  CHECK(r->scope == "train.py#88");
  CHECK(r->expiration == 1700000000.5);
  CHECK(r->signal == 9);
  CHECK_FALSE(parse_timer_request("not json"));
  CHECK_FALSE(parse_timer_request(R"({"pid": 1})"));
  CHECK_FALSE(parse_timer_request(R"({"pid": -4, "scope_id": "s", "expiration_time": 1})"));
}

TEST_CASE("file timer: acquire, release, expire, forget", "[agent][timer]") {
  TimerTable t;
  t.apply({1, "a", 100.0, 9});
  t.apply({1, "b", 50.0, 9});
  t.apply({2, "a", 70.0, 15});
  CHECK(t.next_expiry() == 50.0);
  t.apply({1, "b", -1, 0});  // released
  CHECK(t.next_expiry() == 70.0);
  CHECK(t.take_expired(60.0).empty());
  const auto expired = t.take_expired(100.0);
  REQUIRE(expired.size() == 2);
  CHECK(expired[0].pid == 2);  // earliest first
  CHECK(expired[1].scope == "a");
  CHECK_FALSE(t.next_expiry());
  t.apply({3, "x", 10.0, 9});
  CHECK(t.has_pid(3));
  CHECK_FALSE(t.has_pid(4));
  t.forget_pid(3);
  CHECK_FALSE(t.has_pid(3));
  CHECK_FALSE(t.next_expiry());
}

TEST_CASE("file timer: the server reports an expired timer and each request as progress",
          "[agent][timer]") {
  test::TempDir dir;
  EventQueue events;
  std::atomic<int> requests{0};
  FileTimerServer server(dir.file("timer.fifo"), events, [&](int) { ++requests; });
  const auto send = [&](const std::string& line) {
    const int fd = ::open(server.path().c_str(), O_WRONLY | O_NONBLOCK);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
    ::close(fd);
  };
  const double now = unix_seconds();
  send(fmt::format(R"({{"version": 1, "pid": 41, "scope_id": "kept", "expiration_time": {}, "signal": 9}})"
                   "\n", now + 0.2));
  send(fmt::format(R"({{"version": 1, "pid": 41, "scope_id": "kept", "expiration_time": -1, "signal": 0}})"
                   "\n"));
  send(fmt::format(R"({{"version": 1, "pid": 42, "scope_id": "late", "expiration_time": {}, "signal": 9}})"
                   "\n", now + 0.3));
  send("garbage\n");
  auto e = events.pop(Deadline::after(30s));
  REQUIRE(e);
  CHECK(e->kind == AgentEvent::Kind::kTimerExpired);
  CHECK(e->pid == 42);
  CHECK(e->text == "late");
  CHECK(e->timer_signal == 9);
  CHECK(unix_seconds() >= e->expired_at);
  CHECK(requests == 3);
  // The released one never fires.
  CHECK_FALSE(events.pop(Deadline::after(500ms)));
}

TEST_CASE("file timer: a path that is not a FIFO is refused", "[agent][timer]") {
  test::TempDir dir;
  EventQueue events;
  { std::ofstream(dir.file("plain")) << "x"; }
  CHECK_THROWS_AS(FileTimerServer(dir.file("plain"), events, nullptr), ConfigError);
}
