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
