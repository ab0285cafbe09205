// The one sbcast of a --hosts=slurm job, with a stand-in for sbcast on PATH: the hosts that
// asked for ddprun get sbcast's copy when it succeeds, and the bytes on their own sessions when
// it fails or does not finish by its deadline.

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio.hpp>

#include "cluster/slurm_broadcast.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// PATH holds only a directory with an `sbcast` script of the given body, for the test's span.
class FakeSbcast {
 public:
  explicit FakeSbcast(const std::string& body) {
    const auto path = dir_.file("sbcast");
    {
      std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    }
    ::chmod(path.c_str(), 0755);
    if (const char* old = std::getenv("PATH")) old_ = old;
    ::setenv("PATH", (dir_.path() + ":/usr/bin:/bin").c_str(), 1);
  }
  ~FakeSbcast() { old_ ? ::setenv("PATH", old_->c_str(), 1) : ::unsetenv("PATH"); }
  std::string file(const std::string& name) const { return dir_.file(name); }

 private:
  TempDir dir_;
  std::optional<std::string> old_;
};

std::shared_ptr<const StagedBinary> some_binary() {
  auto b = std::make_shared<StagedBinary>();
  b->version = "test";
  b->bytes = std::make_shared<const std::string>("bytes");
  return b;
}

// What a host that asked gets, with the fake sbcast on PATH: the file on the nodes ("" when
// the bytes come on its session).
std::optional<std::string> ask(Deadline deadline) {
  boost::asio::io_context io;
  SlurmBroadcast broadcast(io, "/bin/true", some_binary(), deadline);
  std::optional<std::string> got;
  broadcast.request([&](std::shared_ptr<const StagedBinary> binary, const std::string&) {
    REQUIRE(binary);
    got = binary->file_on_hosts;
  });
  io.run_for(30s);  // ends once sbcast's end and its timer are handled
  return got;
}

}  // namespace

TEST_CASE("slurm broadcast: sbcast's copy when it succeeds, the session's bytes when it fails",
          "[cluster][slurm]") {
  {
    FakeSbcast ok("exit 0");
    const auto got = ask(Deadline::after(30s));
    REQUIRE(got);
    CHECK(got->starts_with(kBroadcastPrefix));
  }
  {
    FakeSbcast failing("exit 1");
    CHECK(ask(Deadline::after(30s)) == std::string());
  }
}

TEST_CASE("slurm broadcast: a hung sbcast is ended at its deadline, and the hosts get the bytes",
          "[cluster][slurm]") {
  // A stand-in that never finishes on its own.
  FakeSbcast hung("exec tail -f /dev/null");
  const auto start = Clock::now();
  CHECK(ask(Deadline::after(500ms)) == std::string());
  CHECK(Clock::now() - start < 20s);  // the deadline, not the 30 s of the wait above
}

TEST_CASE("slurm broadcast: no time left when the first host asks: sbcast is not started",
          "[cluster][slurm]") {
  FakeSbcast marking("touch \"$(dirname \"$0\")/ran\"; exit 0");
  CHECK(ask(Deadline::after(0s)) == std::string());
  CHECK_FALSE(file_exists(marking.file("ran")));
}
