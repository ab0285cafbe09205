// Where ranks are, read from real gdb output (recorded from Debian's gdb 13 with python3.11-dbg
// attached to torch 1.13 Gloo workers and to the native fake worker), and how ranks are grouped
// and told apart in the root cause.

#include <catch2/catch.hpp>


#include "agent/stack_report.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;

namespace {

std::string fixture(const std::string& name) {
  const auto path = std::string(STACK_FIXTURES) + "/" + name;
  REQUIRE(test::file_exists(path));
  return test::read_file(path);
}

RankWhere at(int rank, const std::string& where, bool in_collective) {
  RankWhere r;
  r.rank = rank;
  r.where = where;
  r.in_collective = in_collective;
  return r;
}

}  // namespace

TEST_CASE("stacks: a Python rank blocked in all_reduce", "[agent][stacks]") {
  const auto stacks = parse_gdb_output(fixture("gdb_python_rank0.txt"), 30237);
  REQUIRE(stacks.python.size() == 5);
  CHECK(stacks.python[0].builtin);
  CHECK(stacks.python[1].function == "all_reduce");
  CHECK(stacks.python[2].function == "step");
  CHECK(stacks.python[2].line == 7);
  CHECK(stacks.python[2].source == "dist.all_reduce(t)");
  // The main thread's native frames (LWP = pid), not the last thread printed.
  REQUIRE_FALSE(stacks.native.empty());
  CHECK(stacks.native[5].function == "c10d::Work::wait");

  const auto r = locate(stacks);
  CHECK(r.where == "in all_reduce, train.py:7 step()");
  CHECK(r.in_collective);
}

TEST_CASE("stacks: a Python rank asleep in its data loading", "[agent][stacks]") {
  const auto r = locate(parse_gdb_output(fixture("gdb_python_rank1.txt"), 30238));
  // A built-in is named as the user's code called it.
  CHECK(r.where == "in time.sleep, train.py:4 load_batch()");
  CHECK_FALSE(r.in_collective);
}

TEST_CASE("stacks: a native worker, no Python frames", "[agent][stacks]") {
  const auto stacks = parse_gdb_output(fixture("gdb_native.txt"), 30997);
  CHECK(stacks.python.empty());
  REQUIRE(stacks.native.size() == 5);
  const auto r = locate(stacks);
  // The C library's frames say nothing: the program's own innermost frame is where it is.
  CHECK(r.where == "in (anonymous namespace)::sleep_ms, fake_worker.cpp:151");
  CHECK_FALSE(r.in_collective);
}

TEST_CASE("stacks: output without frames (the debugger could not attach)", "[agent][stacks]") {
  const auto r = locate(parse_gdb_output("ptrace: Operation not permitted.\n", 42));
  CHECK(r.where.empty());
  CHECK_FALSE(r.note.empty());
}

TEST_CASE("stacks: ranks grouped by where they are, the odd one marked", "[agent][stacks]") {
  const auto lines = group_ranks({at(0, "in all_reduce, train.py:41 step()", true),
                                  at(1, "in time.sleep, train.py:37 load_batch()", false),
                                  at(2, "in all_reduce, train.py:41 step()", true)},
                                 3);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "ranks 0, 2 (2 of 3): in all_reduce, train.py:41 step()");
  CHECK(lines[1] == "rank 1 (1 of 3):     in time.sleep, train.py:37 load_batch()   "
                    "<- not in the collective");
}

TEST_CASE("stacks: nobody is marked when no rank is in a collective", "[agent][stacks]") {
  const auto lines = group_ranks({at(0, "in time.sleep, a.py:1 f()", false),
                                  at(1, "in busy, a.py:2 g()", false)},
                                 2);
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], !Contains("<-"));
  CHECK_THAT(lines[1], !Contains("<-"));
}

TEST_CASE("stacks: the ranks out of step", "[agent][stacks]") {
  CHECK(ranks_out_of_step({at(0, "in all_reduce, a.py:1 f()", true),
                           at(1, "in time.sleep, a.py:2 g()", false)}) == std::vector<int>{1});
  // A failed rank whose error came from a collective counts as inside one.
  RankWhere failed;
  failed.rank = 2;
  failed.note = "exited with code 1";
  failed.in_collective = true;
  CHECK(ranks_out_of_step({failed, at(1, "in time.sleep, a.py:2 g()", false)}) ==
        std::vector<int>{1});
  // All blocked in the collective: nobody out of step (a hang of the whole job).
  CHECK(ranks_out_of_step({at(0, "in all_reduce, a.py:1 f()", true),
                           at(1, "in all_reduce, a.py:1 f()", true)})
            .empty());
  CHECK(ranks_out_of_step({at(0, "in time.sleep, a.py:1 f()", false)}).empty());
}

TEST_CASE("stacks: a failed rank's error tells whether it came from a collective",
          "[agent][stacks]") {
  CHECK(mentions_collective(
      "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line "
      "1541, in all_reduce"));
  CHECK_FALSE(mentions_collective("ValueError: bad batch\n  File \"train.py\", line 3, in f"));
}

TEST_CASE("stacks: a collective's timeout is told from a lost peer and an ordinary error",
          "[agent][stacks]") {
  CHECK(mentions_collective_timeout("RuntimeError: [./gloo/transport/tcp/unbound_buffer.cc:81] "
                                    "Timed out waiting 8000ms for recv operation to complete"));
  CHECK(mentions_collective_timeout(
      "torch.distributed.DistBackendError: [Rank 0] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600082 "
      "milliseconds before timing out."));
  CHECK_FALSE(mentions_collective_timeout(
      "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer"));
  CHECK_FALSE(mentions_collective_timeout("ValueError: bad batch"));
}

TEST_CASE("stacks: rank lists as ranges", "[agent][stacks]") {
  CHECK(format_rank_list({5, 0, 2, 6, 7, 9, 8}) == "0, 2, 5-9");
  CHECK(format_rank_list({1, 2}) == "1, 2");
  CHECK(format_rank_list({3}) == "3");
}

TEST_CASE("stacks: records round-trip through the store's JSON", "[agent][stacks]") {
  auto r = at(3, "in all_reduce, a.py:1 f()", true);
  r.host = "node-b";
  r.node = 1;
  r.local_rank = 1;
  r.pid = 77;
  const auto back = where_from_json(where_to_json({r}));
  REQUIRE(back.size() == 1);
  CHECK(back[0].rank == 3);
  CHECK(back[0].host == "node-b");
  CHECK(back[0].where == r.where);
  CHECK(back[0].in_collective);
  CHECK_THROWS(where_from_json("[{\"rank\": 1}]"));
}

TEST_CASE("stacks: ddprun's own walker of the interpreter's threads (no py-bt)",
          "[agent][stacks]") {
  // Rank 0 waits in all_reduce, rank 1 sleeps in its data loading; the walker prints no
  // built-in frame, so the call on the innermost line names what the rank is in.
  auto r0 = locate(parse_gdb_output(fixture("gdb_walker_rank0.txt"), 5347));
  CHECK(r0.where == "in all_reduce, hang.py:30 step()");
  CHECK(r0.in_collective);
  auto r1 = locate(parse_gdb_output(fixture("gdb_walker_rank1.txt"), 5348));
  CHECK(r1.where == "in time.sleep, hang.py:25 load_batch()");
  CHECK_FALSE(r1.in_collective);
}

TEST_CASE("stacks: the main Python thread is the one that says where the rank is",
          "[agent][stacks]") {
  const std::string text =
      "--- python ---\n"
      "Python thread 22 (most recent call first):\n"
      "  File \"/srv/loader.py\", line 9, in fetch\n"
      "    sock.recv(4096)\n"
      "Python thread 11 (main) (most recent call first):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 3, in barrier\n"
      "    work.wait()\n"
      "  File \"/srv/train.py\", line 12, in main\n"
      "    dist.barrier()\n"
      "--- native ---\n";
  const auto r = locate(parse_gdb_output(text, 11));
  CHECK(r.where == "in barrier, train.py:12 main()");
  CHECK(r.in_collective);
  // A user's line that calls nothing: the rank is running it.
  const auto busy = locate(parse_gdb_output(
      "--- python ---\nPython thread 1 (main) (most recent call first):\n"
      "  File \"/srv/spin.py\", line 4, in spin\n    x += 1\n",
      1));
  CHECK(busy.where == "in spin.py:4 spin()");
}
