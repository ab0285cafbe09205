// Faults found by probing the launcher as an adversary or a careless user would, each run
// against the real binary: a log directory another user controls, workers that would inherit
// the agent's raised limits.

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "integration/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

TEST_CASE("hard to break: a --log-dir another user controls is refused before anything starts",
          "[launcher][robust]") {
  if (geteuid() != 0) {
    WARN("not root: cannot make a directory of another user: skipped");
    return;
  }
  TempDir dir;
  const auto theirs = dir.file("theirs");
  std::filesystem::create_directory(theirs);
  REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
  const auto started = dir.file("started");
  DdprunProcess p({"--log-dir=" + theirs, "--tee=3", "--master-port=0", "--no-python", "touch",
                   started});
  CHECK(p.wait(60s) == 2);
  CHECK_THAT(p.output(), Catch::Contains("ddprun: --log-dir=" + theirs + ": " + theirs +
                                         " belongs to user 65534"));
  CHECK_FALSE(file_exists(started));
  CHECK(std::filesystem::is_empty(theirs));

  // A sticky directory everyone may write to (as /tmp) is fine: no one can move our entries.
  const auto sticky = dir.file("sticky");
  std::filesystem::create_directory(sticky);
  ::chmod(sticky.c_str(), 01777);
  DdprunProcess ok({"--log-dir=" + sticky, "--tee=3", "--master-port=0", "--no-python", "touch",
                    started});
  CHECK(ok.wait(60s) == 0);
  CHECK(file_exists(started));
}

TEST_CASE("hard to break: workers get the open-files limit the agent was started with",
          "[launcher][robust]") {
  // The agent raises its own soft limit to the hard one for its store connections; a worker
  // must see what it would see without ddprun.
  DdprunProcess p({"--nproc-per-node=2", "--master-port=0", "--no-python", "sh", "-c",
                   "echo limit=$(ulimit -n)"},
                  {}, {"sh", "-c", "ulimit -Sn 256 && exec \"$@\"", "sh"});
  REQUIRE(p.wait(60s) == 0);
  CHECK_THAT(p.output(), Catch::Contains("[default0]:limit=256"));
  CHECK_THAT(p.output(), Catch::Contains("[default1]:limit=256"));
}

TEST_CASE("hard to break: static nodes started with different settings all fail at once, "
          "told why",
          "[launcher][robust]") {
  const auto port = "--master-port=" + std::to_string(free_port());
  SECTION("--max-restarts") {
    DdprunProcess node0({"--nnodes=2", "--node-rank=0", "--max-restarts=3", port, "--no-python",
                         "true"});
    DdprunProcess node1({"--nnodes=2", "--node-rank=1", "--max-restarts=0", port, "--no-python",
                         "true"});
    // Well inside the 600 s join timeout either would otherwise wait.
    CHECK(node0.wait(60s) == 124);
    CHECK(node1.wait(60s) == 124);
    for (const auto* node : {&node0, &node1}) {
      INFO(node->output());
      CHECK_THAT(node->output(), Catch::Contains("the nodes were started with different settings"));
      CHECK_THAT(node->output(), Catch::Contains("--max-restarts=0") &&
                                     Catch::Contains("--max-restarts=3"));
    }
  }
  SECTION("--nnodes") {
    DdprunProcess node0({"--nnodes=2", "--node-rank=0", port, "--no-python", "true"});
    // The first node is waiting for its peer when the one with another count arrives.
    REQUIRE(node0.wait_for_output("waiting for the others", 30s));
    DdprunProcess node1({"--nnodes=3", "--node-rank=1", port, "--no-python", "true"});
    CHECK(node0.wait(60s) == 124);
    CHECK(node1.wait(60s) == 124);
    for (const auto* node : {&node0, &node1}) {
      INFO(node->output());
      CHECK_THAT(node->output(), Catch::Contains("different node counts") &&
                                     Catch::Contains("--nnodes=3") && Catch::Contains("--nnodes=2"));
    }
  }
}

TEST_CASE("hard to break: an elastic node with other settings is refused, the job goes on",
          "[launcher][robust]") {
  TempDir dir;
  const auto endpoint = "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> common{"--rdzv-backend=c10d", endpoint, "--nnodes=1:2",
                                        "--rdzv-conf=last_call_timeout=1", "--no-python", "sh",
                                        "-c", "touch " + dir.file("ran_$RANK")};
  std::vector<std::string> first{"--max-restarts=2"};
  first.insert(first.end(), common.begin(), common.end());
  DdprunProcess node_a(first);
  REQUIRE(node_a.wait_for_output("joined round", 30s));
  std::vector<std::string> second{"--max-restarts=0"};
  second.insert(second.end(), common.begin(), common.end());
  DdprunProcess node_b(second);
  CHECK(node_b.wait(60s) == 124);
  CHECK_THAT(node_b.output(), Catch::Contains("cannot join") &&
                                  Catch::Contains("--max-restarts=0 where the job") &&
                                  Catch::Contains("has --max-restarts=2"));
  CHECK(node_a.wait(60s) == 0);
  CHECK(file_exists(dir.file("ran_0")));
  CHECK_FALSE(file_exists(dir.file("ran_1")));
}
