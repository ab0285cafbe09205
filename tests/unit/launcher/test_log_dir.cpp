// The log directory cannot be redirected by another user: a --log-dir that someone else could
// rearrange is refused, and the job's own directory is always one it made itself.

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "common/error.hpp"
#include "launcher/log_dir.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
namespace fs = std::filesystem;

TEST_CASE("log dir: a directory another user could rearrange is named, with why",
          "[launcher][log_dir]") {
  ddprun::test::TempDir dir;  // 0700, ours
  CHECK(why_not_private(dir.path()).empty());
  CHECK(why_not_private("/tmp").empty());  // sticky, root's

  const auto shared = dir.file("shared");
  fs::create_directory(shared);
  ::chmod(shared.c_str(), 0777);
  CHECK_THAT(why_not_private(shared),
             Catch::Contains(shared + " can be written by every user and is not sticky (mode 777)"));
  ::chmod(shared.c_str(), 01777);
  CHECK(why_not_private(shared).empty());
  ::chmod(shared.c_str(), 0775);
  CHECK_THAT(why_not_private(shared), Catch::Contains("can be written by its group"));

  // Below a directory that is not private, nothing is.
  ::chmod(shared.c_str(), 0777);
  const auto below = shared + "/logs";
  fs::create_directory(below);
  ::chmod(below.c_str(), 0700);
  CHECK_THAT(why_not_private(below), Catch::Contains(shared + " can be written"));

  if (geteuid() == 0) {
    const auto theirs = dir.file("theirs");
    fs::create_directory(theirs);
    REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
    CHECK_THAT(why_not_private(theirs),
               Catch::Contains(theirs + " belongs to user 65534, who could replace"));
  }
}

TEST_CASE("log dir: an existing name is never reused or followed", "[launcher][log_dir]") {
  ddprun::test::TempDir dir;
  const auto elsewhere = dir.file("elsewhere");
  fs::create_directory(elsewhere);
  // Names someone prepared: a link to elsewhere and a directory.
  fs::create_directory_symlink(elsewhere, dir.file("run_a"));
  fs::create_directory(dir.file("run_b"));
  std::vector<std::string> suffixes{"a", "b", "c"};
  std::size_t next = 0;
  const auto made = make_fresh_dir(dir.path(), "run_", [&] { return suffixes.at(next++); });
  CHECK(made == fs::path(dir.file("run_c")));
  CHECK(next == 3);
  CHECK(fs::is_directory(fs::symlink_status(made)));
  CHECK(fs::is_empty(elsewhere));
  // When every draw is taken, it says so instead of using one.
  next = 0;
  suffixes = {"a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a"};
  CHECK_THROWS_AS(make_fresh_dir(dir.path(), "run_", [&] { return suffixes.at(next++); }),
                  ConfigError);
  CHECK(next == 16);
}

TEST_CASE("log dir: a run id with slashes names one directory, inside --log-dir",
          "[launcher][log_dir]") {
  ddprun::test::TempDir dir;
  LaunchConfig config;
  config.log_dir = dir.path();
  config.rdzv_id = "team/../job";
  LogDir log(config);
  const fs::path made = log.path();
  CHECK(made.parent_path() == fs::path(dir.path()));
  CHECK(made.filename().string().rfind("team_.._job_", 0) == 0);
  CHECK(fs::is_directory(made));
}
