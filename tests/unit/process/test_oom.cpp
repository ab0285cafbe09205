// Reading the memory cgroup's count of OOM kills, on cgroup trees laid out as the kernel lays
// them out (v1, v2, and v2 beside v1 controllers), built in a temporary directory.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "process/oom.hpp"
#include "testing/test_util.hpp"

using ddprun::oom_kill_count;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("oom: the kill count of this process's memory cgroup", "[process][oom]") {
  ddprun::test::TempDir root;
  const fs::path r = root.path();
  SECTION("cgroup v1: memory.oom_control of the memory hierarchy's path") {
    write(r / "memory/jobs/42/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
    CHECK(oom_kill_count("5:devices:/\n4:memory:/jobs/42\n0::/\n", r.string()) == 3);
    // A path without the file: no count, not zero.
    CHECK_FALSE(oom_kill_count("4:memory:/elsewhere\n", r.string()).has_value());
  }
  SECTION("cgroup v2: memory.events") {
    write(r / "user.slice/job/memory.events",
          "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n");
    CHECK(oom_kill_count("0::/user.slice/job\n", r.string()) == 2);
  }
  SECTION("v2 mounted at unified/ beside v1 controllers without memory") {
    write(r / "unified/job/memory.events", "oom 1\noom_kill 1\n");
    CHECK(oom_kill_count("8:pids:/\n0::/job\n", r.string()) == 1);
  }
  SECTION("the v1 memory controller wins over a v2 file") {
    write(r / "memory/a/memory.oom_control", "oom_kill 7\n");
    write(r / "a/memory.events", "oom_kill 1\n");
    CHECK(oom_kill_count("0::/a\n4:memory:/a\n", r.string()) == 7);
  }
  CHECK_FALSE(oom_kill_count("", r.string()).has_value());
  CHECK_FALSE(oom_kill_count("garbage", r.string()).has_value());
}
