// remove_tree on a real file system: what it removes, what it never follows, where it stops.

#include <catch2/catch.hpp>

#include <fcntl.h>

#include <filesystem>
#include <fstream>

#include "common/remove_tree.hpp"
#include "testing/test_util.hpp"

namespace fs = std::filesystem;
using ddprun::remove_tree;

TEST_CASE("remove_tree: a run's tree goes, a link's target stays, the depth is a limit",
          "[remove_tree]") {
  ddprun::test::TempDir dir;
  const fs::path tree = dir.file("run");
  const fs::path kept = dir.file("kept");
  fs::create_directories(tree / "attempt_0/0");
  fs::create_directories(tree / "attempt_0/1");
  fs::create_directories(kept);
  std::ofstream(tree / "attempt_0/0/error.json") << "{}";
  std::ofstream(kept / "file") << "stays";
  fs::create_directory_symlink(kept, tree / "attempt_0/1/link");

  SECTION("deep enough: all of it") {
    CHECK(remove_tree(AT_FDCWD, tree.c_str(), 3));
    CHECK_FALSE(fs::exists(tree));
    CHECK(fs::exists(kept / "file"));
  }
  SECTION("a level short (the rank directories' files): it says so, and the files stay") {
    CHECK_FALSE(remove_tree(AT_FDCWD, tree.c_str(), 2));
    CHECK(fs::exists(tree / "attempt_0/0/error.json"));
    CHECK(fs::exists(kept / "file"));
  }
  SECTION("nothing there is not a failure") {
    CHECK(remove_tree(AT_FDCWD, dir.file("absent").c_str(), 6));
  }
}
