// What a person sees from the real ddprun binary: progress lines while it waits (with a short
// --progress-interval), the summary at the end, and programs that cannot run. Every wait is for
// a line in the output or a file, with a deadline that only catches hangs.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

constexpr auto kHang = 60s;

std::string port_arg(std::uint16_t port) { return "--master-port=" + std::to_string(port); }

std::vector<std::string> fake(std::vector<std::string> flags) {
  flags.push_back("--progress-interval=0.2");
  flags.push_back("--no-python");
  flags.push_back(FAKE_WORKER_BINARY);
  return flags;
}

}  // namespace

TEST_CASE("progress: a static rendezvous says who is missing until they come", "[progress]") {
  auto port = port_arg(free_port());
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", port}));
  REQUIRE(node0.wait_for_output("1/2 nodes joined, missing node ranks [1]", kHang));
  CHECK_THAT(node0.output(), Contains("s of 600s"));
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port}));
  CHECK(node0.wait(kHang) == 0);
  CHECK(node1.wait(kHang) == 0);
}

TEST_CASE("progress: --log-level warn keeps waits quiet", "[progress]") {
  DdprunProcess node0(fake({"--nnodes=2", port_arg(free_port()), "--log-level=warn",
                            "--rdzv-conf=join_timeout=1"}));
  CHECK(node0.wait(kHang) == 124);
  CHECK_THAT(node0.output(), Contains("rendezvous timed out"));
  CHECK_THAT(node0.output(), !Contains("missing node ranks [1];"));
}

TEST_CASE("progress: an elastic round says how many joined and how many it needs",
          "[progress]") {
  DdprunProcess node(fake({"--nnodes=2:3", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port()),
                           "--local-addr=127.0.0.1"}));
  REQUIRE(node.wait_for_output("round 0: 1 node(s) joined, at least 2 needed", kHang));
  ::kill(node.pid(), SIGTERM);
  CHECK(node.wait(kHang) == 128 + SIGTERM);
}

TEST_CASE("progress: the exit barrier names the nodes still running", "[progress]") {
  TempDir dir;
  auto port = port_arg(free_port());
  // Node 0 (which serves the store) runs until the test lets it finish; node 1 is done at once.
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", port, "--local-addr=hostA"}),
                      {{"FAKE_MODE", "after_file:go:0:0"}, {"FAKE_TOUCH_DIR", dir.path()}});
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port, "--local-addr=hostB"}));
  REQUIRE(node1.wait_for_output("exit barrier: this node's workers are done; waiting for node 0 "
                                "(hostA) still running",
                                kHang));
  std::ofstream(dir.file("go")) << "\n";
  CHECK(node0.wait(kHang) == 0);
  CHECK(node1.wait(kHang) == 0);
}

TEST_CASE("progress: stopping names the ranks that have not exited", "[progress]") {
  TempDir dir;
  DdprunProcess p(fake({"--nproc-per-node=2", port_arg(free_port()), "--shutdown-timeout=2"}),
                  {{"FAKE_MODE", "stubborn"}, {"FAKE_TOUCH_DIR", dir.path()}});
  REQUIRE(wait_until([&] {
    return file_exists(dir.file("started_0_0")) && file_exists(dir.file("started_1_0"));
  }, kHang));
  ::kill(p.pid(), SIGTERM);
  REQUIRE(p.wait_for_output("stopping workers: rank(s) 0, 1 have not exited", kHang));
  CHECK(p.wait(kHang) == 128 + SIGTERM);
  CHECK_THAT(p.output(), Contains("after SIGTERM (SIGKILL in"));
}

TEST_CASE("summary: every attempt and the totals at the end, and in the events file",
          "[progress]") {
  TempDir dir;
  DdprunProcess p(fake({"--nproc-per-node=2", "--max-restarts=1", port_arg(free_port()),
                        "--events-file", dir.file("events.jsonl"), "--local-addr=hostA"}),
                  {{"FAKE_MODE", "fail_rank:1:3"}});
  REQUIRE(p.wait(kHang) == 0);
  CHECK_THAT(p.output(), Contains("Job summary for node hostA (group rank 0)"));
  CHECK_THAT(p.output(), Contains("failed: rank 1 on hostA exited with 3"));
  CHECK_THAT(p.output(), Contains("succeeded"));
  CHECK_THAT(p.output(), Contains("restarts 1 of 1, membership changes 0"));
  auto lines = read_lines(dir.file("events.jsonl"));
  REQUIRE_FALSE(lines.empty());
  auto last = nlohmann::json::parse(lines.back());
  REQUIRE(last.at("event") == "job_finished");
  const auto& summary = last.at("summary");
  CHECK(summary.at("exit_code") == 0);
  REQUIRE(summary.at("attempts").size() == 2);
  CHECK(summary.at("attempts")[1].at("ended") == "succeeded");
}

TEST_CASE("errors: a program that cannot run exits 127 or 126 and says why in words",
          "[progress]") {
  SECTION("a path that does not exist") {
    DdprunProcess p({"--no-python", "/nonexistent/ddprun-prog"});
    CHECK(p.wait(kHang) == 127);
    CHECK_THAT(p.output(), Contains("cannot run /nonexistent/ddprun-prog: No such file"));
  }
  SECTION("a bare name that is not on PATH names the PATH it searched") {
    DdprunProcess p({"--no-python", "ddprun-no-such-program"}, {{"PATH", "/nonexistent:/bin"}});
    CHECK(p.wait(kHang) == 127);
    CHECK_THAT(p.output(), Contains("command not found on PATH=/nonexistent:/bin"));
  }
  SECTION("a file without execute permission") {
    TempDir dir;
    std::ofstream(dir.file("script")) << "#!/bin/sh\n";
    DdprunProcess p({"--no-python", dir.file("script")});
    CHECK(p.wait(kHang) == 126);
    CHECK_THAT(p.output(), Contains("permission denied"));
  }
  SECTION("on a two-node job both agents learn it through the rendezvous") {
    auto port = port_arg(free_port());
    DdprunProcess node0({"--nnodes=2", "--node-rank=0", port, "--no-python", "/nonexistent/x"});
    DdprunProcess node1({"--nnodes=2", "--node-rank=1", port, "--no-python", "/nonexistent/x"});
    CHECK(node0.wait(kHang) == 127);
    CHECK(node1.wait(kHang) == 127);
    CHECK_THAT(node1.output(), Contains("cannot run /nonexistent/x: No such file"));
  }
  for (const char* internal : {"default_launcher", "[system:"}) {
    INFO(internal);
    DdprunProcess p({"--no-python", "/nonexistent/y"});
    p.wait(kHang);
    CHECK_THAT(p.output(), !Contains(internal));
  }
}

// Runtime failures, as a table: each exits with its documented code and one message that says
// what failed, where (address, node), and how long it waited, in the user's words.
TEST_CASE("errors: rendezvous and store failures say what, where and how long", "[errors]") {
  // A port with a listener that is not ddprun's, for "address in use".
  const auto busy = free_port();
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(busy);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  const auto closed = std::to_string(free_port());  // nobody listens there

  struct Case {
    std::string what;
    std::vector<std::string> flags;
    int code;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases{
      {"node 0 alone times out, naming the missing node and the time",
       {"--nnodes=2", port_arg(free_port()), "--rdzv-conf=join_timeout=1"},
       124,
       {"rendezvous timed out", "1s", "[1]"}},
      {"node 1 cannot reach node 0's store",
       {"--nnodes=2", "--node-rank=1", "--master-port=" + closed, "--rdzv-conf=join_timeout=1"},
       124,
       {"127.0.0.1:" + closed}},
      {"the store's port is taken by another program",
       {"--nnodes=2", "--master-port=" + std::to_string(busy), "--rdzv-conf=join_timeout=2"},
       124,
       {"127.0.0.1:" + std::to_string(busy)}},
      {"an elastic agent cannot reach the rendezvous endpoint",
       {"--nnodes=1:2", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:" + closed,
        "--rdzv-conf=is_host=0,join_timeout=1"},
       124,
       {"127.0.0.1:" + closed}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    DdprunProcess p(fake(c.flags));
    CHECK(p.wait(kHang) == c.code);
    const auto out = p.output();
    INFO(out);
    for (const auto& needle : c.needles) CHECK_THAT(out, Contains(needle));
    for (const char* internal : {"boost", "asio", "std::", "[system:", "what()", "CLI11",
                                 "nlohmann", "basic_string", "default_launcher", "internal error"}) {
      CHECK_THAT(out, !Contains(internal, Catch::CaseSensitive::No));
    }
  }
  ::close(listener);
}
