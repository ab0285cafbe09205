// The status publisher over the in-memory store: when it writes the agent's record, seen by a
// store that notes every write and its time.

#include <catch2/catch.hpp>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/status_board.hpp"
#include "monitor/status_publisher.hpp"
#include "store/memory_store.hpp"
#include "testing/hook_store.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr auto kHang = 30s;  // only catches hangs

struct Write {
  Clock::time_point at;
  json record;
};

// A node of one rank, running its first attempt, and a publisher whose every record is noted.
struct Published {
  explicit Published(std::chrono::milliseconds between_attempts)
      : board("run", "static", "hostA", 3),
        publisher(
            board,
            [this](Deadline) -> std::unique_ptr<store::Store> {
              return std::make_unique<test::HookStore>(
                  shared.connect(), [this](const std::string& key, const std::string& value) {
                    if (key.rfind("status/node/", 0) != 0) return;
                    std::lock_guard lock(mutex);
                    writes.push_back({Clock::now(), json::parse(value)});
                  });
            },
            {}, std::chrono::hours(1), between_attempts) {}

  // The states written so far, in order.
  std::vector<std::string> states() {
    std::lock_guard lock(mutex);
    std::vector<std::string> out;
    for (const auto& w : writes) out.push_back(w.record.at("state").get<std::string>());
    return out;
  }
  // Waits for a record in `state`; returns when it was written.
  Clock::time_point written(const std::string& state) {
    std::optional<Clock::time_point> at;
    REQUIRE(test::wait_until(
        [&] {
          std::lock_guard lock(mutex);
          if (!writes.empty() && writes.back().record.at("state") == state) at = writes.back().at;
          return at.has_value();
        },
        kHang));
    return *at;
  }

  store::MemoryStore shared;
  std::mutex mutex;
  std::vector<Write> writes;
  StatusBoard board;
  StatusPublisher publisher;
};

void start_workers(StatusBoard& board, int pid) {
  board.on_event("workers_started", {{"pids", {pid}}});
}

void fail(StatusBoard& board) {
  board.on_event("attempt_decided",
                 {{"success", false}, {"root_cause", {{"kind", 1}, {"exit_code", 3}}}});
}

}  // namespace

TEST_CASE("status publisher: between two attempts the record waits for the next start, and "
          "at most its bound", "[status]") {
  Published p(2s);
  start_workers(p.board, 101);
  const auto first = p.written("running");

  // A restart that does not move on: its state is written when the bound after the last write
  // has passed (without the bound's wait, a second after it).
  fail(p.board);
  p.board.on_event("restart", {{"attempt", 1}});
  const auto restarting = p.written("restarting");
  CHECK(restarting - first >= 1900ms);

  // A rendezvous followed by the next attempt's start: one write, of the start.
  p.board.on_event("rendezvous_started", json::object());
  start_workers(p.board, 102);
  p.written("running");
  CHECK(p.states() == std::vector<std::string>{"running", "restarting", "running"});
  std::lock_guard lock(p.mutex);
  CHECK(p.writes.back().record.at("restarts") == 1);
}

TEST_CASE("status publisher: the end of the run ends a wait between attempts", "[status]") {
  Published p(std::chrono::hours(1));
  start_workers(p.board, 101);
  p.written("running");
  // The run ends while its workers stop (a signal): the board is closed in that state. The
  // end's record is written at once; a publisher still waiting between attempts would be
  // stopped at this deadline without writing it.
  fail(p.board);
  p.publisher.finish(kHang);
  CHECK(p.states() == std::vector<std::string>{"running", "stopping"});
}

TEST_CASE("status publisher: a store that is gone holds the end for one try, not a deadline",
          "[status]") {
  // An opener that never connects and gives up only at its deadline, as a client of a store
  // whose host is gone does; it notes how long each try was allowed.
  std::mutex mutex;
  std::vector<Clock::duration> allowed;
  StatusBoard board("run", "static", "hostA", 3);
  auto publisher = std::make_unique<StatusPublisher>(
      board,
      [&](Deadline deadline) -> std::unique_ptr<store::Store> {
        {
          std::lock_guard lock(mutex);
          allowed.push_back(deadline.remaining());
        }
        std::this_thread::sleep_until(deadline.when());
        throw std::runtime_error("could not connect");
      },
      std::function<void(NodeStatus&)>{}, std::chrono::hours(1));
  start_workers(board, 101);
  REQUIRE(test::wait_until(
      [&] {
        std::lock_guard lock(mutex);
        return !allowed.empty();
      },
      kHang));
  // The agent ends while the publisher tries to connect: its end is held for what is left of
  // the try under way (the first is StatusPublisher::kOpenTry), not for the write's whole
  // deadline of 5 s.
  const auto start = Clock::now();
  fail(board);
  publisher->finish(1s);
  publisher.reset();
  CHECK(Clock::now() - start < 4s);
  std::lock_guard lock(mutex);
  CHECK(allowed.front() <= StatusPublisher::kOpenTry);
}
