// Hostile or mistaken surroundings, end to end with real agents on 127.0.0.1: a client that does
// not know the job's secret, descriptors and daemons that must not outlive the job, another
// program or another job on the store's port.

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"
#include "testing/ddprun_process.hpp"
#include "store/tcp_store_client.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace ddprun::test;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {

constexpr auto kHang = 60s;  // only catches hangs

std::vector<std::string> fake(std::vector<std::string> flags) {
  flags.push_back("--no-python");
  flags.push_back(FAKE_WORKER_BINARY);
  return flags;
}

std::string write_token(const TempDir& dir, const std::string& name, const std::string& secret) {
  const auto path = dir.file(name);
  std::ofstream(path) << secret << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

// A client of the job's store, as anyone on the network could open one.
void connect_as(std::uint16_t port, const std::string& run_id, const std::string& secret) {
  store::StoreClientOptions o;
  o.port = port;
  o.run_id = run_id;
  o.secret = secret;
  store::TcpStoreClient client(o, Deadline::after(10s));
  client.set(run_id + "/news/attempt/0/outcome", "success", Deadline::after(5s));
}

}  // namespace

TEST_CASE("ddprun: with a secret, a client that does not know it cannot touch the job",
          "[security]") {
  TempDir dir;
  const auto port = free_port();
  const auto token = "--token-file=" + write_token(dir, "token", "the-job-secret-0042");
  auto node = [&](int rank) {
    return fake({"--nnodes=2", "--node-rank=" + std::to_string(rank), "--nproc-per-node=1",
                 "--master-port=" + std::to_string(port), "--rdzv-id=job42", token});
  };
  const std::map<std::string, std::string> env{{"FAKE_MODE", "after_file:go:0:0"},
                                               {"FAKE_TOUCH_DIR", dir.path()}};
  DdprunProcess node0(node(0), env);
  DdprunProcess node1(node(1), env);
  REQUIRE(wait_until([&] {
    return file_exists(dir.file("started_0_0")) && file_exists(dir.file("started_1_0"));
  }, kHang));
  // The run id is on the command line for anyone to read; the secret is not.
  CHECK_THROWS_AS(connect_as(port, "job42", ""), AuthError);
  CHECK_THROWS_WITH(connect_as(port, "job42", "a-guess-at-the-secret"),
                    Contains("authentication failed"));
  CHECK(process_alive(node0.pid()));  // the job goes on as if nothing happened
  std::ofstream(dir.file("go")).close();
  CHECK(node0.wait(kHang) == 0);
  CHECK(node1.wait(kHang) == 0);
  const auto out = node0.output();
  CHECK_THAT(out, Contains("with the job's secret"));
  CHECK_THAT(out, Contains("authentication failed"));  // the store says whom it refused
}

// One node: no other agent can join, so the store is the agent's memory and nothing listens
// on the master port; a port that another program holds does not matter to it.
TEST_CASE("ddprun: a one-node job binds no store port", "[security]") {
  std::uint16_t busy = 0;
  const int listener = listen_on_loopback(&busy);  // another program on the master port
  REQUIRE(listener >= 0);
  DdprunProcess p(fake({"--nproc-per-node=2", "--master-port=" + std::to_string(busy)}),
                  {{"FAKE_MODE", "succeed"}});
  CHECK(p.wait(kHang) == 0);
  CHECK_THAT(p.output(), Contains("store in this agent's memory (one node)"));
  ::close(listener);
}

// libcrypto is dlopen-ed on first use (common/libcrypto.hpp), so a job without a secret
// never pays for loading it: the agent's mappings show which.
// libcrypto is dlopen-ed on first use: HMAC, to prove the job's secret over TCP. An agent that
// serves the store uses it in-process and has nothing to prove by itself; two agents with a
// secret prove it to each other, and then both map it.
TEST_CASE("ddprun: libcrypto is loaded only when the job's secret is proven over TCP",
          "[security]") {
  auto maps_crypto = [](pid_t pid) {
    for (const auto& line : read_lines(fmt::format("/proc/{}/maps", pid))) {
      if (line.find("/libcrypto.so") != std::string::npos) return true;
    }
    return false;
  };
  for (const int nodes : {1, 2}) {
    for (const bool with_secret : {false, true}) {
      INFO("nodes: " << nodes << ", with a secret: " << with_secret);
      TempDir dir;
      const auto port = "--master-port=" + std::to_string(free_port());
      std::vector<std::unique_ptr<DdprunProcess>> agents;
      for (int node = 0; node < nodes; ++node) {
        auto flags = fake({"--nproc-per-node=1", "--nnodes=" + std::to_string(nodes),
                           "--node-rank=" + std::to_string(node), port});
        if (with_secret) {
          flags.insert(flags.begin(),
                       "--token-file=" + write_token(dir, "token", "a-job-secret-1234"));
        }
        agents.push_back(std::make_unique<DdprunProcess>(
            flags, std::map<std::string, std::string>{{"FAKE_MODE", "after_file:go:0:0"},
                                                      {"FAKE_TOUCH_DIR", dir.path()}}));
      }
      for (int rank = 0; rank < nodes; ++rank) {
        REQUIRE(wait_until([&] { return file_exists(dir.file(fmt::format("started_{}_0", rank))); },
                           kHang));
      }
      for (const auto& agent : agents) CHECK(maps_crypto(agent->pid()) == (with_secret && nodes > 1));
      std::ofstream(dir.file("go")).close();
      for (const auto& agent : agents) CHECK(agent->wait(kHang) == 0);
    }
  }
}

TEST_CASE("ddprun: two agents share the secret through DDPRUN_TOKEN, workers never see it",
          "[security]") {
  TempDir dir;
  const auto port = "--master-port=" + std::to_string(free_port());
  std::map<std::string, std::string> env{{"FAKE_MODE", "env"}, {"FAKE_ENV_DIR", dir.path()},
                                         {"DDPRUN_TOKEN", "shared-through-env-1234"}};
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", port}), env);
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port}), env);
  REQUIRE(node0.wait(kHang) == 0);
  REQUIRE(node1.wait(kHang) == 0);
  for (int rank = 0; rank < 2; ++rank) {
    auto worker_env = read_env_file(dir.file("env_" + std::to_string(rank) + ".txt"));
    CHECK(worker_env["WORLD_SIZE"] == "2");
    CHECK(worker_env.count("DDPRUN_TOKEN") == 0);
  }
}

TEST_CASE("ddprun: a node with the wrong secret fails at once with a clear message",
          "[security]") {
  TempDir dir;
  const auto port = "--master-port=" + std::to_string(free_port());
  const std::vector<std::string> common{"--nnodes=2", port, "--rdzv-conf=join_timeout=120"};
  auto with = [&](std::vector<std::string> flags, const std::string& token) {
    flags.insert(flags.end(), common.begin(), common.end());
    flags.push_back("--token-file=" + write_token(dir, token, token));
    return fake(flags);
  };
  DdprunProcess node0(with({"--node-rank=0"}, "right-secret-0123456"),
                      {{"FAKE_MODE", "sleep:0"}});
  DdprunProcess node1(with({"--node-rank=1"}, "wrong-secret-6543210"),
                      {{"FAKE_MODE", "sleep:0"}});
  const auto start = std::chrono::steady_clock::now();
  CHECK(node1.wait(kHang) == 124);
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // not the 120 s join timeout
  CHECK_THAT(node1.output(), Contains("authentication failed"));
  kill(node0.pid(), SIGTERM);
  node0.wait(kHang);
}

TEST_CASE("ddprun: a store open beyond loopback without a secret is named at startup",
          "[security]") {
  const auto port = "--master-port=" + std::to_string(free_port());
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", "--master-addr=0.0.0.0", port}),
                      {{"FAKE_MODE", "sleep:0"}});
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port}), {{"FAKE_MODE", "sleep:0"}});
  REQUIRE(node0.wait(kHang) == 0);
  REQUIRE(node1.wait(kHang) == 0);
  CHECK_THAT(node0.output(), Contains("is reachable from other hosts and has no secret") &&
                                 Contains("can read the ranks' pids and last output lines"));
}

TEST_CASE("ddprun: a store on loopback without a secret says that any local user can read it",
          "[security]") {
  const auto port = "--master-port=" + std::to_string(free_port());
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", port}), {{"FAKE_MODE", "sleep:0"}});
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port}), {{"FAKE_MODE", "sleep:0"}});
  REQUIRE(node0.wait(kHang) == 0);
  REQUIRE(node1.wait(kHang) == 0);
  CHECK_THAT(node0.output(), Contains("no secret: any user of this host can read the ranks' "
                                      "pids and last output lines"));
  CHECK_THAT(node0.output(), !Contains("is reachable from other hosts"));
}

TEST_CASE("ddprun: a secret too short, or a token file that cannot be read, is a usage error",
          "[security]") {
  TempDir dir;
  DdprunProcess short_secret(fake({"--token-file=" + write_token(dir, "t", "short")}));
  CHECK(short_secret.wait(kHang) == 2);
  CHECK_THAT(short_secret.output(), Contains("the secret has 5 bytes, at least 16"));
  DdprunProcess missing(fake({"--token-file=" + dir.file("nope")}));
  CHECK(missing.wait(kHang) == 2);
  CHECK_THAT(missing.output(), Contains("cannot read it"));
}

TEST_CASE("ddprun: a worker inherits no descriptor but its standard streams", "[security]") {
  // Two nodes, so that node 0's agent holds the store's listening socket, its connections and
  // the other agent's, and each agent its worker pipes: none may reach a worker.
  TempDir dir;
  const auto port = "--master-port=" + std::to_string(free_port());
  std::map<std::string, std::string> env{{"FAKE_MODE", "fds"}, {"FAKE_ENV_DIR", dir.path()}};
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", "--nproc-per-node=2", port}), env);
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port}), env);
  REQUIRE(node0.wait(kHang) == 0);
  REQUIRE(node1.wait(kHang) == 0);
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    auto lines = read_lines(dir.file("fds_" + std::to_string(rank) + ".txt"));
    std::set<std::string> fds;
    for (const auto& line : lines) fds.insert(line.substr(0, line.find(' ')));
    INFO("open: " << fmt::format("{}", fmt::join(lines, "; ")));
    CHECK(fds == std::set<std::string>{"0", "1", "2"});
  }
}

TEST_CASE("ddprun: daemons that workers start in sessions of their own end with the job",
          "[security]") {
  TempDir dir;
  const auto pid_file = dir.file("pids");
  SECTION("after a normal end") {
    DdprunProcess p(fake({"--nproc-per-node=2", "--master-port=" + std::to_string(free_port())}),
                    {{"FAKE_MODE", "daemon"}, {"FAKE_PID_FILE", pid_file}});
    CHECK(p.wait(kHang) == 0);
    CHECK_THAT(p.output(), Contains("ended 2 process(es) that the workers left running"));
  }
  SECTION("after SIGTERM to the agent") {
    DdprunProcess p(fake({"--nproc-per-node=2", "--master-port=" + std::to_string(free_port()),
                          "--shutdown-timeout=2"}),
                    {{"FAKE_MODE", "daemon_hang"}, {"FAKE_PID_FILE", pid_file}});
    REQUIRE(wait_until([&] { return read_lines(pid_file).size() == 2; }, kHang));
    kill(p.pid(), SIGTERM);
    CHECK(p.wait(kHang) == 143);
  }
  const auto pids = read_lines(pid_file);
  REQUIRE(pids.size() == 2);
  CHECK(wait_until_dead(pids, kHang));
}

// Such a child stays in the agent's session, so the agent's own sweep (other sessions) leaves
// it; the guardian's sweep ends it, and the agent must not tell the guardian that nothing is
// left while it still has a child.
TEST_CASE("ddprun: a worker's child in a process group of its own ends with the job",
          "[security]") {
  TempDir dir;
  const auto pid_file = dir.file("pids");
  DdprunProcess p(fake({"--nproc-per-node=1", "--master-port=" + std::to_string(free_port())}),
                  {{"FAKE_MODE", "group_child"}, {"FAKE_PID_FILE", pid_file}});
  CHECK(p.wait(kHang) == 0);
  const auto pids = read_lines(pid_file);
  REQUIRE(pids.size() == 1);
  CHECK(wait_until_dead(pids, kHang));
}

namespace {

// A program on a port that is not a ddprun store: it answers every connection as a web
// server would, and closes it.
class ForeignServer {
 public:
  ForeignServer() {
    fd_ = listen_on_loopback(&port_);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;  // the listener was shut down
        char request[256];
        (void)!::recv(c, request, sizeof(request), 0);
        const std::string reply = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        (void)!::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        ::close(c);
      }
    });
  }
  ~ForeignServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace

TEST_CASE("ddprun: another program on the master port is named at once, not waited for",
          "[security]") {
  ForeignServer foreign;
  DdprunProcess p(fake({"--nnodes=2", "--node-rank=1",
                        "--master-port=" + std::to_string(foreign.port()),
                        "--rdzv-conf=join_timeout=120"}),
                  {{"FAKE_MODE", "sleep:0"}});
  const auto start = std::chrono::steady_clock::now();
  CHECK(p.wait(kHang) == 124);
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // not the 120 s join timeout
  CHECK_THAT(p.output(), Contains("is not a ddprun store"));
}

TEST_CASE("ddprun: a c10d job does not lean on a store that another job's agent hosts",
          "[security]") {
  TempDir dir;
  const auto endpoint = "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port());
  DdprunProcess first(fake({"--rdzv-backend=c10d", endpoint, "--rdzv-id=first",
                            "--rdzv-conf=last_call_timeout=0.1"}),
                      {{"FAKE_MODE", "after_file:go:0:0"}, {"FAKE_TOUCH_DIR", dir.path()}});
  REQUIRE(wait_until([&] { return file_exists(dir.file("started_0_0")); }, kHang));
  DdprunProcess second(fake({"--rdzv-backend=c10d", endpoint, "--rdzv-id=second"}),
                       {{"FAKE_MODE", "sleep:0"}});
  CHECK(second.wait(kHang) == 124);
  CHECK_THAT(second.output(), Contains("hosted by the agent of another job (run id 'first'"));
  std::ofstream(dir.file("go")).close();
  CHECK(first.wait(kHang) == 0);
}

TEST_CASE("ddprun: a log directory that cannot be made is a usage error, before the store",
          "[security]") {
  TempDir dir;
  std::ofstream(dir.file("a-file")) << "not a directory\n";
  const auto port = free_port();
  DdprunProcess p(fake({"--log-dir=" + dir.file("a-file") + "/logs", "-r", "3",
                        "--master-port=" + std::to_string(port)}));
  CHECK(p.wait(kHang) == 2);
  CHECK_THAT(p.output(), Contains("cannot create a writable directory"));
  CHECK_THAT(p.output(), !Contains("store: listening"));
}

TEST_CASE("ddprun: an events file that cannot be opened is a usage error, before the store",
          "[security]") {
  TempDir dir;
  const auto events = dir.file("missing-dir") + "/events.jsonl";
  DdprunProcess p(fake({"--nnodes=2", "--events-file=" + events,
                        "--master-port=" + std::to_string(free_port())}));
  CHECK(p.wait(kHang) == 2);
  CHECK_THAT(p.output(), Contains("--events-file=" + events + ": cannot open it"));
  CHECK_THAT(p.output(), !Contains("store: listening"));
}
