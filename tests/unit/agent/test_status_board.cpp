// What an agent knows of its job, fed by its events and its workers' lines.

#include <catch2/catch.hpp>

#include <thread>

#include <nlohmann/json.hpp>

#include "agent/status_board.hpp"
#include "common/failure_record.hpp"
#include "rendezvous/rendezvous_handler.hpp"

using namespace ddprun;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

Round round_of(int id, int group_rank, int base_rank, int restarts) {
  Round r;
  r.id = id;
  r.ranks.group_rank = group_rank;
  r.ranks.group_world_size = 2;
  r.ranks.local_world_size = 2;
  r.ranks.base_rank = base_rank;
  r.ranks.world_size = 4;
  r.restart_count = restarts;
  return r;
}

json failure(Failure::Kind kind, int signal = 0, int lost_node = -1) {
  Failure f;
  f.kind = kind;
  f.signal = signal;
  f.lost_node = lost_node;
  return json::parse(f.to_json());
}

}  // namespace

TEST_CASE("the board follows an agent through rounds, a restart and its end", "[agent][status]") {
  StatusBoard board("job", "static", "host-a", 2);
  auto s = board.snapshot();
  CHECK(s.state == "starting");
  CHECK(s.node == -1);
  CHECK(s.max_restarts == 2);
  CHECK(s.agent_pid > 0);

  board.on_event("rendezvous_started", json::object());
  CHECK(board.snapshot().state == "rendezvous");
  board.on_event("rendezvous_completed", {{"world_size", 4}});
  board.on_round(round_of(0, 1, 2, 0));
  CHECK(board.snapshot().node_check.is_null());
  // The record keeps this node's own findings: node 0's event lists every node's.
  const json mine = {{"node", 1}, {"host", "host-a"}, {"what", "/dev/shm has 16 MiB free"}};
  const json theirs = {{"node", 0}, {"host", "host-b"}, {"what", "ulimit -n is 256"}};
  board.on_event("node_check", {{"figures", {{"node", 1}}},
                                {"findings", {mine, theirs}},
                                {"seconds", 0.1}});
  const json kept = {{"figures", {{"node", 1}}}, {"findings", {mine}}, {"seconds", 0.1}};
  CHECK(board.snapshot().node_check == kept);
  CHECK(board.snapshot().to_json().at("node_check") == kept);
  auto line0 = board.line_hook(0);
  auto line1 = board.line_hook(1);
  board.on_event("workers_started", {{"pids", {101, 102}}});
  line0("epoch 1 step 5");
  s = board.snapshot();
  CHECK(s.state == "running");
  CHECK(s.node == 1);
  CHECK(s.rounds == 1);
  REQUIRE(s.ranks.size() == 2);
  CHECK(s.ranks[0].rank == 2);
  CHECK(s.ranks[1].rank == 3);
  CHECK(s.ranks[0].pid == 101);
  CHECK(s.ranks[0].last_line == "epoch 1 step 5");
  CHECK(s.ranks[0].last_output_age >= 0);
  CHECK(s.ranks[1].last_output_age < 0);  // nothing written yet

  board.on_event("worker_exited", {{"local_rank", 1}, {"exit_code", 3}, {"signal", 0}});
  board.on_event("attempt_decided", {{"success", false}, {"root_cause", failure(Failure::Kind::kWorker)}});
  s = board.snapshot();
  CHECK(s.ranks[1].state == "exited 3");
  CHECK(s.ranks[1].pid == 0);
  CHECK(s.state == "stopping");
  CHECK(s.failures.at("exit_code") == 1);
  board.on_event("workers_stopped", json::object());
  s = board.snapshot();
  CHECK(s.ranks[0].state == "stopped");  // stopped by the agent, not exited on its own
  CHECK(s.ranks[0].pid == 0);
  CHECK(s.ranks[1].state == "exited 3");
  board.on_event("restart", {{"attempt", 1}});
  CHECK(board.snapshot().state == "restarting");
  CHECK(board.snapshot().restarts == 1);

  // The next round: fresh ranks and lines. A hook of the old attempt writes nowhere visible.
  board.on_round(round_of(1, 0, 0, 1));
  auto next = board.line_hook(0);
  board.on_event("workers_started", {{"pids", {201, 202}}});
  line0("a late line of the old attempt");
  s = board.snapshot();
  CHECK(s.ranks[0].rank == 0);
  CHECK(s.ranks[0].last_line.empty());

  // Failures by kind.
  board.on_event("attempt_decided", {{"success", false}, {"root_cause", failure(Failure::Kind::kWorker, 9)}});
  board.on_event("attempt_decided", {{"success", false}, {"root_cause", failure(Failure::Kind::kHang)}});
  board.on_event("attempt_decided", {{"success", false}, {"root_cause", failure(Failure::Kind::kAgent, 0, 1)}});
  board.on_event("attempt_decided", {{"success", false}, {"root_cause", failure(Failure::Kind::kMembership)}});
  s = board.snapshot();
  CHECK(s.failures.at("signal") == 1);
  CHECK(s.failures.at("hang") == 1);
  CHECK(s.failures.at("node_lost") == 1);
  CHECK(s.membership_changes == 1);
  CHECK(s.failures.count("membership") == 0);

  board.finish("failed", "rank 3 failed", 3);
  s = board.snapshot();
  CHECK(s.has_ended());
  CHECK(s.exit_code == 3);
  CHECK(s.ranks[0].state == "stopped");
  CHECK(s.ranks[0].pid == 0);
}

TEST_CASE("a rank's last line is cut at a character boundary, and a hook outlives its board",
          "[agent][status]") {
  std::function<void(std::string_view)> hook;
  {
    StatusBoard board("job", "c10d", "h", 0);
    board.on_round(round_of(0, 0, 0, 0));
    hook = board.line_hook(0);
    board.on_event("workers_started", {{"pids", {7}}});
    // 511 ASCII bytes, then a 3-byte character that would cross the limit.
    hook(std::string(StatusBoard::kMaxLineBytes - 1, 'a') + "\xe2\x82\xac" + "tail");
    const auto line = board.snapshot().ranks[0].last_line;
    CHECK(line.size() == StatusBoard::kMaxLineBytes - 1);
    CHECK(line.back() == 'a');
  }
  hook("written after the board is gone");  // must not touch freed memory (ASan would say)
}

TEST_CASE("a waiter on the board wakes at a change, not at a line", "[agent][status]") {
  StatusBoard board("job", "static", "h", 0);
  board.on_round(round_of(0, 0, 0, 0));
  auto hook = board.line_hook(0);
  const auto seen = board.version();
  hook("a line is not a change of state");
  CHECK(board.version() == seen);
  std::thread t([&] { board.on_event("rendezvous_started", json::object()); });
  board.wait_for_change(seen, Clock::now() + 60s);
  CHECK(board.version() != seen);
  t.join();
  board.close();
  board.wait_for_change(board.version(), Clock::now() + 60s);  // closed: returns at once
}
