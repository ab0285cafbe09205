// check_program: the shell's 127/126 with a message in words, on real files.

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>

#include "common/exit_codes.hpp"
#include "process/program_check.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using Catch::Matchers::Contains;

namespace {

void write_file(const std::string& path, mode_t mode) {
  std::ofstream(path) << "#!/bin/sh\nexit 0\n";
  ::chmod(path.c_str(), mode);
}

}  // namespace

TEST_CASE("check_program: a path that does not exist is 127, named with the reason",
          "[agent][program]") {
  auto c = check_program("/nonexistent/dir/prog", "/usr/bin");
  CHECK(c.exit_code == kExitNotFound);
  CHECK_THAT(c.message, Contains("/nonexistent/dir/prog") && Contains("No such file"));
  CHECK(c.path.empty());
}

TEST_CASE("check_program: a bare name not on PATH is 127 and the message shows PATH",
          "[agent][program]") {
  test::TempDir dir;
  auto c = check_program("ddprun-no-such-program", dir.path() + ":/nonexistent");
  CHECK(c.exit_code == kExitNotFound);
  CHECK_THAT(c.message, Contains("command not found") &&
                            Contains("PATH=" + dir.path() + ":/nonexistent"));
}

TEST_CASE("check_program: a file without execute permission or a directory is 126",
          "[agent][program]") {
  test::TempDir dir;
  write_file(dir.file("plain"), 0644);
  auto c = check_program(dir.file("plain"), "");
  CHECK(c.exit_code == kExitCannotStart);
  CHECK_THAT(c.message, Contains(dir.file("plain")) && Contains("permission"));
  auto d = check_program(dir.path(), "");
  CHECK(d.exit_code == kExitCannotStart);
  CHECK_THAT(d.message, Contains("directory"));
}

TEST_CASE("check_program: a bare name takes the first executable match on PATH",
          "[agent][program]") {
  test::TempDir a;
  test::TempDir b;
  write_file(a.file("tool"), 0644);  // found first, but not executable
  write_file(b.file("tool"), 0755);
  auto c = check_program("tool", a.path() + ":" + b.path());
  CHECK(c.exit_code == 0);
  CHECK(c.path == b.file("tool"));
  SECTION("only unusable matches: 126, naming the file and why") {
    auto only = check_program("tool", a.path());
    CHECK(only.exit_code == kExitCannotStart);
    CHECK_THAT(only.message, Contains(a.file("tool")) && Contains("permission"));
  }
}
