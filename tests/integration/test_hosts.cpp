// One command for several hosts (`ddprun --hosts`), end to end with the real binary. The remote
// shell is testing/local_ssh.sh, which runs the remote command here with a fresh
// environment as sshd would; the "hosts" are loopback addresses (127.0.0.x). The same checks
// against real sshd servers in network namespaces are in tests/netns/ssh_hosts.sh.

#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <set>

#include "testing/child.hpp"
#include "testing/ddprun_process.hpp"
#include "testing/rank_gate.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

constexpr auto kHang = 60s;

// ddprun --hosts=HOSTS over the local stand-in, with the fake worker and these extra flags
// (before the program).
std::vector<std::string> on_hosts(const std::string& hosts, std::vector<std::string> flags) {
  std::vector<std::string> args{"--hosts=" + hosts, "--ssh-command=" LOCAL_SSH,
                                "--master-port=" + std::to_string(free_port())};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--no-python");
  args.push_back(FAKE_WORKER_BINARY);
  return args;
}

std::string fmt_host(int i) { return "127.0.0." + std::to_string(i); }

const std::string kThreeHosts = "127.0.0.1:2,127.0.0.2:1,127.0.0.3:1";

}  // namespace

TEST_CASE("ranks and environment across 3 hosts with 2+1+1 slots", "[hosts]") {
  TempDir dir;
  DdprunProcess p(on_hosts(kThreeHosts, {"-x", "FAKE_MODE=env", "-x", "FAKE_ENV_DIR=" + dir.path(),
                                         "-x", "FOO=bar", "-x", "FROM_HERE"}),
                  {{"FROM_HERE", "here"}, {"TORCH_SHOW_ME", "1"}, {"NOT_FORWARDED", "1"}});
  REQUIRE(p.wait(kHang) == 0);
  std::set<std::string> ranks;
  std::map<std::string, std::string> group_of;
  for (int rank = 0; rank < 4; ++rank) {
    auto env = read_env_file(dir.file("env_" + std::to_string(rank) + ".txt"));
    INFO("rank " << rank);
    CHECK(env["WORLD_SIZE"] == "4");
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["GROUP_RANK"] == (rank < 2 ? "0" : std::to_string(rank - 1)));
    CHECK(env["LOCAL_WORLD_SIZE"] == (rank < 2 ? "2" : "1"));
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(env["FOO"] == "bar");              // -x NAME=VALUE
    CHECK(env["FROM_HERE"] == "here");       // -x NAME: the value here
    CHECK(env["TORCH_SHOW_ME"] == "1");      // TORCH_* is forwarded by default
    CHECK(env.count("NOT_FORWARDED") == 0);  // the rest is not
    CHECK(env.count("DDPRUN_TOKEN") == 0);   // the store's secret stays with the agents
    ranks.insert(env["RANK"]);
  }
  CHECK(ranks.size() == 4);
  const auto out = p.output();
  CHECK_THAT(out, Contains("all 3 hosts are ready"));
  CHECK_THAT(out, Contains("with the job's secret"));  // a random one, made for this job
  CHECK_THAT(out, Contains("Job summary (3 hosts"));
  CHECK_THAT(out, Contains("job finished on 3 hosts"));
}

TEST_CASE("a worker's exit code on host 3 is the command's, with one root cause",
          "[hosts]") {
  DdprunProcess p(on_hosts(kThreeHosts, {"-x", "FAKE_MODE=fail_rank:3:7"}));
  CHECK(p.wait(kHang) == 7);
  const auto out = p.output();
  CHECK(count_of(out, "Root cause (first failure in the job)") == 1);
  CHECK_THAT(out, Contains("host        127.0.0.3"));
  CHECK_THAT(out, Contains("job failed (exit code 7)"));
}

TEST_CASE("every lines reaches the console whole, with its host and rank", "[hosts]") {
  DdprunProcess p(on_hosts(kThreeHosts, {"-x", "FAKE_MODE=lines:2000"}));
  REQUIRE(p.wait(kHang) == 0);
  std::map<std::string, int> lines_of;
  std::istringstream in(p.output());
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("[127.")) continue;
    // "[127.0.0.2:2]:line 17 of 2000 from rank 2": the prefix's rank is the line's.
    auto close = line.find("]:");
    REQUIRE(close != std::string::npos);
    auto rank = line.substr(line.rfind(':', close) + 1, close - line.rfind(':', close) - 1);
    INFO(line);
    REQUIRE(line.ends_with(" of 2000 from rank " + rank));
    REQUIRE(line.find("line ", close) == close + 2);
    ++lines_of[rank];
  }
  CHECK(lines_of == std::map<std::string, int>{{"0", 2000}, {"1", 2000}, {"2", 2000}, {"3", 2000}});
}

TEST_CASE("raw output: a worker's last line without its end does not hide the host's result",
          "[hosts]") {
  // The raw worker writes to the agent's own stdout, where the agent's report follows it on
  // the same line.
  DdprunProcess p({"--hosts=127.0.0.1,127.0.0.2", "--ssh-command=" LOCAL_SSH, "--raw-output",
                   "--master-port=" + std::to_string(free_port()), "--no-python", "sh", "-c",
                   "printf 'unended from rank %s' \"$RANK\""});
  REQUIRE(p.wait(kHang) == 0);
  const auto out = p.output();
  CHECK_THAT(out, Contains("unended from rank 0\n"));
  CHECK_THAT(out, Contains("unended from rank 1\n"));
  CHECK_THAT(out, Contains("job finished on 2 hosts"));
  CHECK(out.find("\x1e") == std::string::npos);  // no report reached the console
}

TEST_CASE("raw output: a worker's line cut by the agent's sign of life reaches the console whole",
          "[hosts]") {
  // The agent says it is alive every half second here; the worker's line stays open for three
  // times that, so that such a report lands inside it.
  DdprunProcess p({"--hosts=127.0.0.1", "--ssh-command=" LOCAL_SSH, "--raw-output",
                   "--hangup-timeout=2", "--master-port=" + std::to_string(free_port()),
                   "--no-python", "sh", "-c",
                   "printf 'first half, '; sleep 1.5; echo 'second half'"});
  REQUIRE(p.wait(kHang) == 0);
  const auto out = p.output();
  CHECK_THAT(out, Contains("first half, second half\n"));
  CHECK(out.find("\x1e") == std::string::npos);  // no report reached the console
}

TEST_CASE("PET_STANDALONE stays with the command: the hosts still form one job", "[hosts]") {
  TempDir dir;
  DdprunProcess p(on_hosts("127.0.0.1,127.0.0.2", {"-x", "FAKE_MODE=env", "-x",
                                                   "FAKE_ENV_DIR=" + dir.path()}),
                  {{"PET_STANDALONE", "1"}});
  REQUIRE(p.wait(kHang) == 0);
  for (int rank = 0; rank < 2; ++rank) {
    auto env = read_env_file(dir.file("env_" + std::to_string(rank) + ".txt"));
    INFO("rank " << rank);
    CHECK(env["WORLD_SIZE"] == "2");
    CHECK(env["GROUP_RANK"] == std::to_string(rank));
  }
}

TEST_CASE("an unreachable host is reported before anything starts", "[hosts]") {
  TempDir dir;
  DdprunProcess p(on_hosts("127.0.0.1,unreachable.invalid,127.0.0.3",
                           {"-x", "FAKE_TOUCH_DIR=" + dir.path()}));
  CHECK(p.wait(kHang) == 123);
  const auto out = p.output();
  CHECK_THAT(out, Contains("1 of 3 host(s) could not be started or failed their checks; nothing was started"));
  CHECK_THAT(out, Contains("unreachable.invalid  node 1: cannot connect: ssh: Could not resolve"));
  CHECK(count_of(out, "node ") == 1);  // one line: the failing host's
  CHECK_FALSE(file_exists(dir.file("started_0_0")));
  CHECK_FALSE(file_exists(dir.file("started_1_0")));
}

TEST_CASE("a host whose turn never came is said not to have been contacted", "[hosts]") {
  // One connection at a time: the first host hangs on login for the whole connect timeout.
  DdprunProcess p(on_hosts("login.hang,127.0.0.2", {"--fanout=1", "--connect-timeout=2"}));
  CHECK(p.wait(kHang) == 123);
  const auto out = p.output();
  CHECK_THAT(out, Contains("login.hang  node 0: no answer within 2s (--connect-timeout)"));
  CHECK_THAT(out, Contains("127.0.0.2   node 1: not contacted: the 1 connection(s) before it "
                           "were still open at the end of 2s (--connect-timeout; --fanout "
                           "allows 1 at once)"));
}

TEST_CASE("a program missing on the hosts, or a missing ddprun, starts nothing",
          "[hosts]") {
  {
    std::vector<std::string> args{"--hosts=127.0.0.1,127.0.0.2", "--ssh-command=" LOCAL_SSH,
                                  "--no-python", "/nonexistent/train"};
    DdprunProcess p(args);
    CHECK(p.wait(kHang) == 123);
    CHECK(count_of(p.output(), "cannot run /nonexistent/train: No such file or directory") == 2);
  }
  {
    DdprunProcess p(on_hosts("127.0.0.1,127.0.0.2",
                             {"--remote-ddprun=/nonexistent/ddprun", "--no-stage"}));
    CHECK(p.wait(kHang) == 123);
    CHECK_THAT(p.output(), Contains("127.0.0.2  node 1: /nonexistent/ddprun not found there"));
  }
}

TEST_CASE("SIGINT to the command stops every host's workers and exits 130", "[hosts]") {
  TempDir dir;
  auto pid_file = dir.file("pids");
  DdprunProcess p(on_hosts(kThreeHosts, {"-x", "FAKE_MODE=grandchild", "-x",
                                         "FAKE_PID_FILE=" + pid_file, "--shutdown-timeout=2"}));
  REQUIRE(wait_until([&] { return read_lines(pid_file).size() == 8; }, kHang));
  kill(p.pid(), SIGINT);
  CHECK(p.wait(kHang) == 130);
  for (const auto& pid : read_lines(pid_file)) CHECK_FALSE(process_alive(std::stoi(pid)));
  CHECK_THAT(p.output(), Contains("SIGINT: forwarding it to the agents on 3 hosts"));
}

TEST_CASE("SIGKILL of the command leaves nothing on any host", "[hosts]") {
  TempDir dir;
  auto pid_file = dir.file("pids");
  DdprunProcess p(on_hosts(kThreeHosts, {"-x", "FAKE_MODE=grandchild", "-x",
                                         "FAKE_PID_FILE=" + pid_file, "--hangup-timeout=2"}));
  REQUIRE(wait_until([&] { return read_lines(pid_file).size() == 8; }, kHang));
  kill(p.pid(), SIGKILL);
  CHECK(p.wait(10s) == 128 + SIGKILL);
  auto pids = read_lines(pid_file);
  CHECK(wait_until_dead(pids, kHang));
}

TEST_CASE("a host whose agent falls silent is ended by the command, whatever the remote shell",
          "[hosts]") {
  // The stand-in for ssh has no keep-alive (as srun has none): only the agent's signs of life
  // tell the command that its host still runs. A stopped agent is a frozen host.
  TempDir dir;
  const auto pid_file = dir.file("pids");
  DdprunProcess p(on_hosts("127.0.0.1,127.0.0.2",
                           {"-x", "FAKE_MODE=grandchild", "-x", "FAKE_PID_FILE=" + pid_file,
                            "--hangup-timeout=2", "--shutdown-timeout=2"}));
  REQUIRE(wait_until([&] { return read_lines(pid_file).size() == 4; }, kHang));
  const auto pids = read_lines(pid_file);
  // The agent of node 1: the parent of the worker whose environment says RANK=1. The lines
  // come in pairs, a worker and its child.
  pid_t agent = -1;
  std::vector<std::string> frozen;
  std::vector<std::string> others;
  for (std::size_t i = 0; i + 1 < pids.size(); i += 2) {
    const std::string env = '\0' + read_file("/proc/" + pids[i] + "/environ");
    const bool rank1 = env.find(std::string("\0RANK=1\0", 8)) != std::string::npos;
    if (rank1) agent = parent_of(std::stoi(pids[i]));
    auto& side = rank1 ? frozen : others;
    side.insert(side.end(), {pids[i], pids[i + 1]});
  }
  REQUIRE(agent > 1);
  kill(agent, SIGSTOP);
  const int code = p.wait(kHang);
  const auto out = p.output();
  INFO("output:\n" << out);
  CHECK(code != 0);
  CHECK_THAT(out, Contains("host 127.0.0.2 (node 1): heard nothing from its agent for"));
  CHECK(wait_until_dead(others, kHang));
  // The frozen host's processes are the test's to end: the stand-in for ssh runs them here, in
  // the remote shell's process group, which the command's end of the connection took whole
  // (its agent's guardian with it), where a real host's would stay with it.
  if (process_alive(agent)) kill(agent, SIGKILL);
  for (const auto& pid : frozen) {
    if (process_alive(std::stoi(pid))) kill(std::stoi(pid), SIGKILL);
  }
}

TEST_CASE("forwarded values and the store's secret never appear on a command line", "[hosts]") {
  TempDir dir;
  {
    std::ofstream(dir.file("token")) << "the-store-secret-4242\n";
  }
  DdprunProcess p(on_hosts("127.0.0.1,127.0.0.2",
                           {"-x", "FAKE_MODE=hang", "-x", "FAKE_TOUCH_DIR=" + dir.path(), "-x",
                            "SECRET_TOKEN", "--shutdown-timeout=2",
                            "--token-file=" + dir.file("token")}),
                  {{"SECRET_TOKEN", "s3cr3t-value"}});
  REQUIRE(wait_until([&] {
    return file_exists(dir.file("started_0_0")) && file_exists(dir.file("started_1_0"));
  }, kHang));
  // Every process's command line, the agents' included.
  std::string cmdlines;
  std::string agents;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto cmdline = read_file(entry.path() / "cmdline");
    if (cmdline.find("--ddprun-session") != std::string::npos) agents += cmdline;
    cmdlines += cmdline;
  }
  CHECK_THAT(agents, Contains("--ddprun-session"));  // the agents are there
  CHECK_THAT(cmdlines, !Contains("s3cr3t-value"));
  CHECK_THAT(cmdlines, !Contains("the-store-secret-4242"));
  CHECK_THAT(agents, !Contains("--token-file"));  // the command reads it; agents get the secret
  kill(p.pid(), SIGTERM);
  CHECK(p.wait(kHang) == 143);
}

TEST_CASE("a hostfile, and an elastic job over the hosts", "[hosts]") {
  TempDir dir;
  {
    std::ofstream file(dir.file("hosts.txt"));
    file << "# two hosts\n127.0.0.1 slots=2\n\n127.0.0.2:1  # the second\n";
  }
  std::vector<std::string> args{"--hostfile=" + dir.file("hosts.txt"),
                                "--ssh-command=" LOCAL_SSH,
                                "--rdzv-backend=c10d",
                                "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port()),
                                "--rdzv-conf=last_call_timeout=0.5",
                                "-x", "FAKE_MODE=env", "-x", "FAKE_ENV_DIR=" + dir.path(),
                                "--no-python", FAKE_WORKER_BINARY};
  DdprunProcess p(args);
  const int code = p.wait(kHang);
  INFO("output:\n" << p.output());
  REQUIRE(code == 0);
  std::set<std::string> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    auto env = read_env_file(dir.file("env_" + std::to_string(rank) + ".txt"));
    CHECK(env["WORLD_SIZE"] == "3");
    ranks.insert(env["RANK"]);
  }
  CHECK(ranks.size() == 3);
}

TEST_CASE("a host that leaves an elastic job under its minimum: the others are stopped",
          "[hosts]") {
  // SIGKILL: the agent ends without a result; SIGTERM: with one of its own, its workers stopped.
  for (const int signal : {SIGKILL, SIGTERM}) {
    INFO("the agent gets signal " << signal);
    TempDir dir;
    {
      std::ofstream(dir.file("token")) << "the-store-secret\n";
    }
    // A store of its own, so that the agent signalled below is not the one serving it.
    const auto port = std::to_string(free_port());
    Child store(SpawnSpec{{DDPRUN_STORE_BINARY, "--host", "127.0.0.1", "--port", port,
                           "--token-file", dir.file("token"), "--log-level", "warn"}, {}, {}});
    const auto pid_file = dir.file("pids");
    DdprunProcess p({"--hosts=127.0.0.1:2,127.0.0.2:1", "--ssh-command=" LOCAL_SSH,
                     "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:" + port,
                     "--rdzv-conf=is_host=0", "--token-file=" + dir.file("token"),
                     "--shutdown-timeout=2", "-x", "FAKE_MODE=grandchild", "-x",
                     "FAKE_PID_FILE=" + pid_file, "--no-python", FAKE_WORKER_BINARY});
    REQUIRE(wait_until([&] { return read_lines(pid_file).size() == 6; }, kHang));
    const auto pids = read_lines(pid_file);
    // A worker's parent is its agent. Without the command's stop, the other agent would wait
    // out the join timeout (600 s) for a second node.
    const pid_t agent = parent_of(std::stoi(pids[0]));
    REQUIRE(agent > 1);
    kill(agent, signal);
    const int code = p.wait(kHang);
    const auto out = p.output();
    INFO("output:\n" << out);
    // The code of the host that left: 123 without a result of its own.
    CHECK(code == (signal == SIGKILL ? 123 : 128 + SIGTERM));
    CHECK_THAT(out, Contains(signal == SIGKILL ? "left the job: its agent ended without a result"
                                               : "left the job: the agent on 127.0.0."));
    CHECK_THAT(out, Contains("the job needs at least 2 host(s) (--nnodes) and no other can join "
                             "a --hosts job: stopping the 1 left"));
    CHECK_THAT(out, Contains("which could not go on without it"));
    CHECK(wait_until_dead(pids, kHang));
    store.signal(SIGTERM);
    CHECK(store.wait_for(10s).has_value());
  }
}

TEST_CASE("node check: the command prints one table for every host, each finding once",
          "[hosts][node_check]") {
  // Every agent inherits the remote shell's limits: under 1024 open files, each host is named.
  auto args = on_hosts(kThreeHosts, {"--node-check=warn"});
  args[1] = "--ssh-command=prlimit --nofile=512: " LOCAL_SSH;
  DdprunProcess p(args);
  const int code = p.wait(kHang);
  const auto out = p.output();
  INFO("output:\n" << out);
  REQUIRE(code == 0);  // warn: the job runs
  // This machine may add findings of its own (a container's small /dev/shm, a link slowed by
  // the suite's other tests): each is in the table once, whatever their number.
  CHECK(count_of(out, "Node check: 3 nodes, ") == 1);
  CHECK(count_of(out, "/dev/shm free") == 1);
  for (int node = 0; node < 3; ++node) {
    const auto finding = "\n  node " + std::to_string(node) + " (" + fmt_host(node + 1) +
                         "): ulimit -n is 512 (at least 1024 needed)\n";
    CHECK(count_of(out, finding) == 1);
    const auto row = std::regex("\n  " + std::to_string(node) + R"( +127\.0\.0\.)" +
                                std::to_string(node + 1) + R"( .* 512 .* findings?\n)");
    CHECK(std::regex_search(out, row));
  }
  // The agents keep their own lines of it to their debug log: nothing twice.
  CHECK(count_of(out, "node check: node ") == 0);
  CHECK(count_of(out, "starting anyway (--node-check=warn)") == 1);
}

TEST_CASE("node check: refuse in an elastic job ends every host with 120, none said to have left",
          "[hosts][node_check]") {
  TempDir dir;
  DdprunProcess p({"--hosts=" + kThreeHosts, "--ssh-command=prlimit --nofile=512: " LOCAL_SSH,
                   "--rdzv-backend=c10d",
                   "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port()),
                   "--node-check=refuse", "-x", "FAKE_TOUCH_DIR=" + dir.path(), "--no-python",
                   FAKE_WORKER_BINARY});
  const int code = p.wait(kHang);
  const auto out = p.output();
  INFO("output:\n" << out);
  CHECK(code == 120);
  CHECK(count_of(out, "Node check: 3 nodes, ") == 1);
  // The refusal is every agent's, not one host's leaving: nobody is stopped for it.
  CHECK(count_of(out, "left the job") == 0);
  CHECK(count_of(out, "SIGTERM") == 0);
  CHECK(std::filesystem::is_empty(dir.path()));  // no worker ran
}

TEST_CASE("tree fan-out: ranks across 10 hosts reached through relays", "[hosts][tree]") {
  TempDir dir;
  std::string hosts;
  for (int i = 1; i <= 10; ++i) hosts += (i > 1 ? "," : "") + fmt_host(i);
  DdprunProcess p(on_hosts(hosts, {"--tree-threshold=2", "--fanout=3", "-x", "FAKE_MODE=env",
                                   "-x", "FAKE_ENV_DIR=" + dir.path()}));
  REQUIRE(p.wait(kHang) == 0);
  for (int rank = 0; rank < 10; ++rank) {
    auto env = read_env_file(dir.file("env_" + std::to_string(rank) + ".txt"));
    CHECK(env["WORLD_SIZE"] == "10");
    CHECK(env["GROUP_RANK"] == std::to_string(rank));
  }
  const auto out = p.output();
  CHECK_THAT(out, Contains("3 directly, each of those starting the rest of its group"));
  CHECK_THAT(out, Contains("Job summary (10 hosts"));
  CHECK(count_of(out, "succeeded") >= 10);
}

TEST_CASE("tree fan-out: a host that cannot be reached deep in the tree starts nothing",
          "[hosts][tree]") {
  TempDir dir;
  // Width 2: nodes 0 and 4 are reached directly; 4 (unreachable) would start 5 and 6.
  DdprunProcess p(on_hosts("127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,bad.invalid,127.0.0.6,"
                           "127.0.0.7",
                           {"--tree-threshold=2", "--fanout=2", "-x",
                            "FAKE_TOUCH_DIR=" + dir.path()}));
  CHECK(p.wait(kHang) == 123);
  const auto out = p.output();
  CHECK_THAT(out, Contains("3 of 7 host(s) could not be started or failed their checks; nothing was started"));
  CHECK_THAT(out, Contains("bad.invalid  node 4: cannot connect"));
  CHECK_THAT(out, Contains("node 5: not reached: bad.invalid (node 4), which starts it, failed"));
  CHECK_FALSE(file_exists(dir.file("started_0_0")));
}

TEST_CASE("tree fan-out: SIGINT and SIGKILL of the command leave nothing", "[hosts][tree]") {
  for (int signal : {SIGINT, SIGKILL}) {
    INFO("signal " << signal);
    TempDir dir;
    auto pid_file = dir.file("pids");
    DdprunProcess p(on_hosts("127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5",
                             {"--tree-threshold=2", "--fanout=2", "-x", "FAKE_MODE=grandchild",
                              "-x", "FAKE_PID_FILE=" + pid_file, "--shutdown-timeout=2",
                              "--hangup-timeout=2"}));
    REQUIRE(wait_until([&] { return read_lines(pid_file).size() == 10; }, kHang));
    kill(p.pid(), signal);
    const int code = p.wait(kHang);
    INFO("output:\n" << p.output());
    CHECK(code == 128 + signal);
    auto pids = read_lines(pid_file);
    CHECK(wait_until_dead(pids, kHang));
  }
}

TEST_CASE("bytes that are not UTF-8 and arguments over 128 KiB reach every host exactly",
          "[hosts]") {
  TempDir dir;
  // A working directory whose name is Latin-1, not UTF-8, and a variable of control characters
  // and high bytes, forwarded: each must arrive byte for byte.
  const std::string cwd = dir.file("caf\xe9-\xff");
  std::filesystem::create_directory(cwd);
  const std::string value = std::string("\x01\x02\t\x1b[0m ") + "\xe9\xff\x80 end";
  // Arguments of 300 KiB in all: more than the remote shell's one command argument may hold
  // (128 KiB), as much as a local start allows (no one argument may exceed 128 KiB there).
  const std::string big(100 << 10, 'a');
  std::vector<std::string> args{"--hosts=127.0.0.1,127.0.0.2", "--ssh-command=" LOCAL_SSH,
                                "--master-port=" + std::to_string(free_port()), "-x",
                                "ODD_BYTES", "--no-python", "sh", "-c",
                                "printf %s \"$ODD_BYTES\" > \"$0/value_$RANK\"; "
                                "pwd > \"$0/cwd_$RANK\"; printf %s \"$1$2$3\" | wc -c > \"$0/arg_$RANK\"",
                                dir.path(), big, big, big};
  DdprunProcess p(args, {{"ODD_BYTES", value}},
                  {"sh", "-c", "cd \"$0\" && exec \"$@\"", cwd});
  REQUIRE(p.wait(kHang) == 0);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    CHECK(read_file(dir.file("value_" + std::to_string(rank))) == value);
    CHECK(read_file(dir.file("cwd_" + std::to_string(rank))) == cwd + "\n");
    CHECK(std::stoul(read_file(dir.file("arg_" + std::to_string(rank)))) == 3 * big.size());
  }
}

// The command folds the lines of every host: one printed, one summary naming the other ranks
// and how many hosts they are on; a line that differs prints. Directly and through relays.
TEST_CASE("identical lines of every host shown once, then one summary (--fold-output)",
          "[hosts][console]") {
  const bool tree = GENERATE(false, true);
  INFO((tree ? "through relays" : "direct"));
  TempDir dir;
  RankGate gate(dir, "echo \"epoch 1 loss 0.$RANK\"\n"
                     "if [ \"$RANK\" = 4 ]; then echo \"rank four saw a NaN\"; fi\n");
  const std::string hosts = "127.0.0.1:2,127.0.0.2:2,127.0.0.3:1,127.0.0.4:1";
  std::vector<std::string> args{"--hosts=" + hosts, "--ssh-command=" LOCAL_SSH,
                                "--master-port=" + std::to_string(free_port()), "--fold-output"};
  if (tree) args.insert(args.end(), {"--tree-threshold=2", "--fanout=2"});
  args.insert(args.end(), {"--no-python", "/bin/sh", gate.script()});
  DdprunProcess p(args);
  REQUIRE(gate.open_when_ready(6, kHang));
  REQUIRE(p.wait(kHang) == 0);
  const auto out = p.output();
  INFO(out);
  static const std::regex printed(R"(\[127\.0\.0\.(\d):(\d)\]:epoch 1 loss 0\.\d\n)");
  static const std::regex summary(R"(\[ranks ([0-9,-]+) on (\d) hosts\] )"
                                  R"(the same: epoch 1 loss 0\.(\d)-0\.(\d)\n)");
  std::smatch first, rest;
  REQUIRE(std::regex_search(out, first, printed));
  CHECK(std::distance(std::sregex_iterator(out.begin(), out.end(), printed),
                      std::sregex_iterator()) == 1);
  REQUIRE(std::regex_search(out, rest, summary));
  // The five other ranks, on the hosts they are on (all four, unless rank 4 or 5 printed).
  const int printer = std::stoi(first[2]);
  CHECK(rest[2] == (printer >= 4 ? "3" : "4"));
  CHECK(count_of(out, "the same: epoch 1 loss") == 1);
  CHECK(count_of(out, "[127.0.0.3:4]:rank four saw a NaN\n") == 1);
}
