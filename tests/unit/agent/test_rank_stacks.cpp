// The chooser's root cause explained by where every rank was (agent/rank_stacks.hpp).

#include <catch2/catch.hpp>

#include "agent/rank_stacks.hpp"
#include "common/exit_codes.hpp"

using namespace ddprun;

namespace {

Round three_ranks_on_two_nodes() {
  Round round;
  round.id = 4;
  round.ranks = assign_ranks({2, 1}, 0);
  return round;
}

RankWhere located(int rank, int node, const std::string& where, bool in_collective) {
  RankWhere r;
  r.rank = rank;
  r.local_rank = rank % 2;
  r.pid = 1000 + rank;
  r.host = "host" + std::to_string(node);
  r.node = node;
  r.where = where;
  r.in_collective = in_collective;
  return r;
}

Failure worker_failed(int rank, int exit_code) {
  Failure f;
  f.kind = Failure::Kind::kWorker;
  f.rank = rank;
  f.local_rank = 0;
  f.pid = 1000 + rank;
  f.host = "host1";
  f.node = 1;
  f.exit_code = exit_code;
  f.message = "exited with code 1";
  f.traceback = "RuntimeError: Timed out waiting for recv";
  return f;
}

}  // namespace

TEST_CASE("a rank alive outside the collective the others failed in becomes the root cause",
          "[rank_stacks]") {
  const auto round = three_ranks_on_two_nodes();
  const AttemptDir dir("/logs/run", round.id);
  std::vector<RankWhere> where{located(0, 0, "in all_reduce, train.py:41 step()", true),
                               located(1, 0, "in time.sleep, train.py:37 load_batch()", false)};
  RankWhere failed;
  failed.rank = 2;
  failed.node = 1;
  failed.host = "host1";
  failed.in_collective = true;
  failed.note = "exited with code 1";
  where.push_back(failed);

  auto f = worker_failed(2, 1);
  explain_root_cause(f, where, round, dir, true);
  CHECK(f.kind == Failure::Kind::kHang);
  CHECK(f.exit_code == kExitHang);
  CHECK(f.rank == 1);
  CHECK(f.host == "host0");
  CHECK(f.pid == 1001);
  CHECK_THAT(f.message, Catch::StartsWith("rank 1 alive outside any collective (in time.sleep") &&
                            Catch::EndsWith("first failure: rank 2 on host1 exited with code 1"));
  CHECK(f.traceback.empty());
  CHECK(f.where.size() == 3);  // one line per group: in all_reduce, in time.sleep, the failed
  CHECK_THAT(f.stacks, Catch::Contains("attempt_4/<local rank>/stacks.txt in each node's") &&
                           Catch::Contains("/logs/run/attempt_4"));
}

TEST_CASE("without --hang-timeout the rank out of step is named, and the job keeps the failed "
          "worker's exit code", "[rank_stacks]") {
  const auto round = three_ranks_on_two_nodes();
  const AttemptDir dir("/logs/run", round.id);
  std::vector<RankWhere> where{located(0, 0, "in all_reduce, train.py:41 step()", true),
                               located(1, 0, "in time.sleep, train.py:37 load_batch()", false)};
  auto f = worker_failed(2, 1);
  f.signal = 6;
  f.exit_code = 134;
  explain_root_cause(f, where, round, dir, false);
  CHECK(f.rank == 1);
  CHECK(f.exit_code == 134);
  CHECK(f.signal == 6);
  CHECK_THAT(f.message, Catch::StartsWith("rank 1 alive outside any collective (in time.sleep"));
}

TEST_CASE("a hang names the ranks out of step, a timer's rank stays the cause", "[rank_stacks]") {
  const auto round = three_ranks_on_two_nodes();
  const AttemptDir dir("/logs/run", round.id);
  const std::vector<RankWhere> where{located(0, 0, "in all_reduce, a.py:1 f()", true),
                                     located(1, 0, "in time.sleep, a.py:2 g()", false),
                                     located(2, 1, "in all_reduce, a.py:1 f()", true)};
  Failure hang;
  hang.kind = Failure::Kind::kHang;
  hang.rank = -1;
  hang.message = "no progress from any of 3 ranks for 3s (--hang-timeout)";
  explain_root_cause(hang, where, round, dir, true);
  CHECK(hang.message == "no progress from any of 3 ranks for 3s (--hang-timeout); out of step: "
                        "rank 1");
  CHECK(hang.rank == 1);

  Failure timer;
  timer.kind = Failure::Kind::kHang;
  timer.rank = 2;
  timer.message = "rank 2: timer 'step' expired 0.5s ago (FileTimer)";
  const auto before = timer.message;
  explain_root_cause(timer, where, round, dir, true);
  CHECK(timer.message == before);
  CHECK(timer.rank == 2);
  CHECK_FALSE(timer.where.empty());  // the grouping is added all the same
}

TEST_CASE("without any rank's stack the root cause is left as it is", "[rank_stacks]") {
  const auto round = three_ranks_on_two_nodes();
  const AttemptDir dir("/logs/run", round.id);
  RankWhere failed;
  failed.rank = 2;
  failed.in_collective = true;
  failed.note = "exited with code 1";
  auto f = worker_failed(2, 1);
  const auto before = f.to_json();
  explain_root_cause(f, {failed}, round, dir, true);
  CHECK(f.to_json() == before);
}
