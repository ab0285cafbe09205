// --node-check's rules (judge, pure), the probe of a real directory, the report's JSON, and the
// exchange through a store.

#include <catch2/catch.hpp>

#include <filesystem>
#include <future>

#include <nlohmann/json.hpp>

#include "agent/node_check.hpp"
#include "common/error.hpp"
#include "store/memory_store.hpp"
#include "testing/test_util.hpp"
#include "unit/agent/healthy_probe.hpp"

using namespace ddprun;
using ddprun::test::healthy;
using ddprun::test::kGiB;
using ddprun::test::kMiB;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> lines(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const auto& f : findings) out.push_back(f.line());
  return out;
}

}  // namespace

TEST_CASE("node check: healthy nodes give no finding", "[agent][node_check]") {
  CHECK(judge({healthy(0)}).empty());
  CHECK(judge({healthy(0), healthy(1), healthy(2)}).empty());
}

TEST_CASE("node check: a directory that cannot be written or is nearly full is named",
          "[agent][node_check]") {
  auto nodes = std::vector{healthy(0), healthy(1), healthy(2)};
  nodes[1].dirs[0].error = "Read-only file system";
  nodes[2].dirs[1].free_bytes = 300 * kMiB;
  // A scratch log directory, removed at the end and holding no output, needs no room.
  nodes[0].dirs[0].free_bytes = 10 * kMiB;
  nodes[0].dirs[0].needs_room = false;
  CHECK(lines(judge(nodes)) ==
        std::vector<std::string>{
            "node 1 (host1): log directory /logs is not writable: Read-only file system",
            "node 2 (host2): program directory /job has 300 MiB free (at least 1 GiB needed)"});
}

TEST_CASE("node check: a program directory no node can write is how the job is set up",
          "[agent][node_check]") {
  auto nodes = std::vector{healthy(0), healthy(1)};
  nodes[0].dirs[1].error = nodes[1].dirs[1].error = "Read-only file system";
  CHECK(judge(nodes).empty());
  nodes[1].dirs[1].error.clear();
  CHECK(lines(judge(nodes)) ==
        std::vector<std::string>{"node 0 (host0): program directory /job is not writable: "
                                 "Read-only file system"});
}

TEST_CASE("node check: a directory that does not answer is named, read-only image or not",
          "[agent][node_check]") {
  auto nodes = std::vector{healthy(0), healthy(1)};
  nodes[0].dirs[1].error = nodes[1].dirs[1].error = "Read-only file system";
  nodes[1].dirs[1].timed_out = true;
  nodes[1].dirs[1].error = "did not answer within 10s";
  CHECK(lines(judge(nodes)) ==
        std::vector<std::string>{"node 1 (host1): program directory /job did not answer within "
                                 "10s (a hung network mount?)"});
}

TEST_CASE("node check: /dev/shm with little room is named, a node without one is not",
          "[agent][node_check]") {
  auto nodes = std::vector{healthy(0), healthy(1), healthy(2)};
  nodes[0].shm_size_bytes = 64 * kMiB;
  nodes[0].shm_free_bytes = 60 * kMiB;
  nodes[2].has_shm = false;
  nodes[2].shm_size_bytes = nodes[2].shm_free_bytes = 0;
  const auto found = lines(judge(nodes));
  REQUIRE(found.size() == 1);
  CHECK(found[0] == "node 0 (host0): /dev/shm has 60 MiB free of 64 MiB (at least 256 MiB "
                    "needed: NCCL and DataLoader workers use it)");
}

TEST_CASE("node check: limits under their floor, or far under the job's median, are named",
          "[agent][node_check]") {
  auto nodes = std::vector{healthy(0), healthy(1), healthy(2), healthy(3)};
  nodes[1].open_files = 512;            // under the floor
  nodes[2].locked_bytes = 64 * 1024;    // the others are unlimited
  nodes[3].processes = 4096;            // a tenth of the others'
  nodes[0].open_files = 40000;          // lower, but not half the median: not named
  CHECK(lines(judge(nodes)) ==
        std::vector<std::string>{
            "node 1 (host1): ulimit -n is 512 (at least 1024 needed)",
            "node 2 (host2): ulimit -l is 64 KiB, the job's median unlimited",
            "node 3 (host3): ulimit -u is 4096, the job's median 100000"});
  // Far under the median but with enough: machines with more memory get higher defaults.
  auto mixed = std::vector{healthy(0), healthy(1)};
  mixed[0].open_files = 65536;
  mixed[1].open_files = 1048576;
  CHECK(judge(mixed).empty());
  // Alone, a node has no median to be far from: only the floors count.
  auto alone = healthy(0);
  alone.processes = 4096;
  CHECK(judge({alone}).empty());
}

TEST_CASE("node check: a real directory is probed by writing to it", "[agent][node_check]") {
  test::TempDir dir;
  ProbeInputs in;
  in.node = 3;
  in.host = "here";
  in.log_dir = dir.path();
  in.program_dir = dir.file("missing");
  in.shm_dir = dir.path();  // any file system will do for the figures
  const NodeProbe p = probe_node(in);
  CHECK(p.node == 3);
  CHECK(p.host == "here");
  REQUIRE(p.dirs.size() == 2);
  CHECK(p.dirs[0].role == "log directory");
  CHECK(p.dirs[0].error.empty());
  CHECK(p.dirs[0].free_bytes > 0);
  CHECK(p.dirs[1].role == "program directory");
  CHECK(p.dirs[1].error == "No such file or directory (errno 2)");
  CHECK(p.has_shm);
  CHECK(p.shm_size_bytes >= p.shm_free_bytes);
  CHECK(p.open_files > 0);
  // Nothing is left in the directory it wrote to.
  CHECK(std::filesystem::is_empty(dir.path()));
  // The same directory twice is probed once.
  in.program_dir = dir.path();
  CHECK(probe_node(in).dirs.size() == 1);
  // A scratch log directory needs to be writable, not to have room.
  in.log_dir_is_scratch = true;
  CHECK_FALSE(probe_node(in).dirs[0].needs_room);
}

TEST_CASE("node check: a report round-trips through JSON, and a foreign one is refused",
          "[agent][node_check]") {
  auto p = healthy(5);
  p.dirs[0].error = "Permission denied";
  p.dirs[1].timed_out = true;
  p.seconds = 0.25;
  p.serves_store = true;
  p.min_nodes = 3;
  const NodeProbe back = probe_from_json(to_json(p));
  CHECK(to_json(back) == to_json(p));
  CHECK_THROWS_AS(probe_from_json(nlohmann::json{{"node", 1}}), ProtocolError);
}

TEST_CASE("node check: every node's report through the store, each node seeing all",
          "[agent][node_check]") {
  store::MemoryStore shared;
  auto other = shared.connect();
  auto later = std::async(std::launch::async, [&] {
    return exchange_probes(*other, "round0", healthy(1), 2, Deadline::after(30s));
  });
  const auto mine = exchange_probes(shared, "round0", healthy(0), 2, Deadline::after(30s));
  const auto theirs = later.get();
  REQUIRE(mine.size() == 2);
  CHECK(mine[0].host == "host0");
  CHECK(mine[1].host == "host1");
  CHECK(to_json(theirs[0]) == to_json(mine[0]));
  CHECK(to_json(theirs[1]) == to_json(mine[1]));
  // A node that never reports ends the wait at its deadline, not later.
  CHECK_THROWS_AS(exchange_probes(shared, "round1", healthy(0), 2, Deadline::after(200ms)),
                  TimeoutError);
}

TEST_CASE("node check: a node after the first round is judged against its members, less those "
          "the check named", "[agent][node_check]") {
  auto first = std::vector{healthy(0), healthy(1)};
  first[1].locked_bytes = 64 * 1024;  // named in the first round: the others are unlimited
  auto again = first[1];              // its agent started again, the limit unchanged
  again.node = 2;
  auto verdict = judge_late(first, again);
  CHECK(verdict.compared_with == 1);
  CHECK(lines(verdict.findings) ==
        std::vector<std::string>{
            "node 2 (host1): ulimit -l is 64 KiB, the job's median unlimited"});
  // Counted in the reference, its old report would have made its own limit the median.
  first.push_back(again);
  CHECK(judge(first).empty());
  // A healthy one is judged by the same rules, and only its own findings are given.
  auto fixed = healthy(2);
  verdict = judge_late({healthy(0), healthy(1), healthy(3)}, fixed);
  CHECK(verdict.compared_with == 3);
  CHECK(verdict.findings.empty());
  // Members that run from a read-only image are named only beside a node that can write its
  // own: a latecomer that can makes them so, and they are not its findings.
  auto image = std::vector{healthy(0), healthy(1)};
  for (auto& member : image) member.dirs[1].error = "Read-only file system";
  CHECK(judge(image).empty());
  auto writable = healthy(2);
  auto together = image;
  together.push_back(writable);
  CHECK(judge(together).size() == 2);
  CHECK(judge_late(image, writable).findings.empty());
  auto small = healthy(3);
  small.shm_free_bytes = 64 * kMiB;
  verdict = judge_late({healthy(0), healthy(1), healthy(2)}, small);
  REQUIRE(verdict.findings.size() == 1);
  CHECK(verdict.findings[0].node == 3);
  // No report to compare with (the members died before theirs): the floors alone.
  auto low = healthy(0);
  low.processes = 4096;
  CHECK(judge_late({}, low).findings.empty());
  CHECK(judge_late({}, small).findings.size() == 1);
}

TEST_CASE("node check: a round's reports read by a node that comes after it, those there by the "
          "deadline", "[agent][node_check]") {
  store::MemoryStore shared;
  auto other = shared.connect();
  auto published = std::async(std::launch::async, [&] {
    return exchange_probes(*other, "r/0", healthy(1), 3, Deadline::after(200ms));
  });
  CHECK_THROWS_AS(published.get(), TimeoutError);  // node 0 and 2 never report
  const auto read = read_probes(shared, "r/0", 3, Deadline::after(200ms), 30s);
  REQUIRE(read.size() == 1);
  CHECK(read[0].host == "host1");
  shared.set("r/0/node_check/0", to_json(healthy(0)).dump(), Deadline::after(30s));
  shared.set("r/0/node_check/2", to_json(healthy(2)).dump(), Deadline::after(30s));
  CHECK(read_probes(shared, "r/0", 3, Deadline::after(30s), 30s).size() == 3);
}

TEST_CASE("node check: exclude leaves out the nodes named as nodes, within the minimum",
          "[agent][node_check]") {
  std::vector<NodeProbe> nodes{healthy(0), healthy(1), healthy(2), healthy(3)};
  nodes[0].serves_store = true;
  const Finding shm{2, "host2", "/dev/shm has 16 MiB free of 16 MiB"};
  const Finding limit{2, "host2", "ulimit -n is 256 (at least 1024 needed)"};
  const Finding slow{3, "host3", "every link to and from it is slow"};
  const Finding link{1, "host1", "link to node 2 (host2): 9 MB/s", 2};

  SECTION("each node named once, in order; a finding about one link excludes neither end") {
    const auto plan = plan_exclusion({slow, shm, limit, link}, nodes);
    CHECK(plan.nodes == std::vector<int>{2, 3});
    CHECK(plan.refused.empty());
  }
  SECTION("only links named: nobody is left out") {
    const auto plan = plan_exclusion({link}, nodes);
    CHECK(plan.nodes.empty());
    CHECK(plan.refused.empty());
  }
  SECTION("fewer than the minimum left: refused, saying how many") {
    // One node given a larger minimum than the others decides for all: the largest counts.
    nodes[1].min_nodes = 3;
    const auto plan = plan_exclusion({shm, slow}, nodes);
    CHECK(plan.refused == "without 2 node(s) the job would have 2, under --nnodes' minimum of 3");
    nodes[1].min_nodes = 2;
    CHECK(plan_exclusion({shm, slow}, nodes).refused.empty());
  }
  SECTION("the node that serves the store cannot be left out") {
    const auto plan = plan_exclusion({Finding{0, "host0", "ulimit -u is 100"}, shm}, nodes);
    CHECK(plan.refused ==
          "node 0 (host0) serves the rendezvous store, which the job cannot go on without");
  }
}

TEST_CASE("node check: sizes as a person reads them", "[agent][node_check]") {
  CHECK(format_bytes(512) == "512 bytes");
  CHECK(format_bytes(64 * 1024) == "64 KiB");
  CHECK(format_bytes(300 * kMiB) == "300 MiB");
  CHECK(format_bytes(kGiB + kGiB / 2) == "1.5 GiB");
  CHECK(format_bytes(1000 * kMiB) == "1000 MiB");
  CHECK(format_bytes(1007 * kGiB) == "1007 GiB");
  CHECK(format_bytes(kUnlimited) == "unlimited");
}
