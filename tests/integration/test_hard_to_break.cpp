// Faults found by probing the launcher as an adversary or a careless user would, each run
// against the real binary: a log directory another user controls, workers that would inherit
// the agent's raised limits.

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "testing/ddprun_process.hpp"
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

TEST_CASE("hard to break: nodes whose join and last-call timeouts differ run one job, static "
          "and c10d", "[launcher][robust]") {
  const auto port = std::to_string(free_port());
  for (const std::string backend : {"static", "c10d"}) {
    INFO(backend);
    auto node = [&](const char* rank, const char* conf) {
      std::vector<std::string> flags{"--nnodes=2", conf, "--no-python", "true"};
      if (backend == "static") {
        flags.insert(flags.begin(), {"--master-port=" + port, rank});
      } else {
        flags.insert(flags.begin(), {"--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:" + port,
                                     "--rdzv-id=timeouts-" + port});
      }
      return std::make_unique<DdprunProcess>(flags);
    };
    auto a = node("--node-rank=0", "--rdzv-conf=join_timeout=60");
    auto b = node("--node-rank=1", "--rdzv-conf=join_timeout=20,last_call_timeout=2");
    CHECK(a->wait(60s) == 0);
    CHECK(b->wait(60s) == 0);
    CHECK_THAT(a->output() + b->output(), !Catch::Contains("different settings") &&
                                              !Catch::Contains("cannot join"));
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

TEST_CASE("hard to break: a second job on one endpoint and run id, with other arguments or "
          "another script of the same name, is refused and the first goes on",
          "[launcher][robust]") {
  TempDir dir;
  Gate gate;
  const auto endpoint = "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port());
  // Python scripts named train.py in two directories; the worker waits at the gate.
  const auto script = [&](const std::string& where, const std::string& extra) {
    std::filesystem::create_directories(dir.file(where));
    const auto path = dir.file(where + "/train.py");
    std::ofstream(path) << "import fcntl, os, sys\n" << extra
                        << "fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_SH)\n";
    return path;
  };
  const auto first_script = script("a", "");
  const auto agent = [&](const std::string& path, const std::string& arg) {
    return std::vector<std::string>{"--rdzv-backend=c10d", endpoint, "--nnodes=1:2",
                                    "--rdzv-id=shared", "--rdzv-conf=last_call_timeout=1", path,
                                    gate.path(), arg};
  };
  const std::map<std::string, std::string> env{{"PYTHON_EXEC", "/usr/bin/python3"}};
  DdprunProcess first(agent(first_script, "--epochs=3"), env);
  REQUIRE(first.wait_for_output("joined round", 30s));
  std::string expected;
  std::vector<std::string> second_args;
  SECTION("the same program, other arguments") {
    second_args = agent(first_script, "--epochs=5");
    expected = "the program's arguments";
  }
  SECTION("another train.py, in another directory") {
    second_args = agent(script("b", "print('job b')\n"), "--epochs=3");
    expected = "the script ";
  }
  DdprunProcess second(second_args, env);
  CHECK(second.wait(60s) == 124);
  INFO(second.output());
  CHECK_THAT(second.output(), Catch::Contains("cannot join") && Catch::Contains(expected));
  gate.open();
  CHECK(first.wait(60s) == 0);
  CHECK_THAT(first.output(), Catch::Contains("restarts 0 of 0, membership changes 0"));
}

TEST_CASE("hard to break: a signalled agent whose store host is gone does not try to record "
          "its workers' failures there", "[launcher][robust]") {
  // Node 1 is stopped by SIGTERM; its worker, as torch's would, writes an error file as it
  // ends, but only once node 0 (the store's host) is gone: the signal is the job's end.
  TempDir dir;
  const auto port = "--master-port=" + std::to_string(free_port());
  Gate node0_gone;
  const std::string worker =
      "trap 'flock -s " + node0_gone.path() + " true; echo stopped > "
      "\"$TORCHELASTIC_ERROR_FILE\"; kill $!; exit 1' TERM; touch " + dir.path() +
      "/started_$RANK; sleep 600 & wait";
  std::vector<std::unique_ptr<DdprunProcess>> nodes;
  for (const char* rank : {"0", "1"}) {
    nodes.push_back(std::make_unique<DdprunProcess>(std::vector<std::string>{
        "--nnodes=2", std::string("--node-rank=") + rank, port, "--no-python", "sh", "-c",
        worker}));
  }
  REQUIRE(wait_until([&] { return file_exists(dir.file("started_0")) &&
                                  file_exists(dir.file("started_1")); }, 60s));
  ::kill(nodes[1]->pid(), SIGTERM);
  REQUIRE(nodes[1]->wait_for_output("stopping workers"));
  ::kill(nodes[0]->pid(), SIGKILL);
  nodes[0]->wait(60s);
  node0_gone.open();
  CHECK(nodes[1]->wait(60s) == 143);
  CHECK_THAT(nodes[1]->output(), !Catch::Contains("could not record the failure"));
}

TEST_CASE("hard to break: one script at different paths on two nodes is one program",
          "[launcher][robust]") {
  TempDir dir;
  const auto endpoint = "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port());
  std::vector<std::unique_ptr<DdprunProcess>> nodes;
  for (const char* where : {"here", "there/deeper"}) {
    std::filesystem::create_directories(dir.file(where));
    std::ofstream(dir.file(std::string(where) + "/train.py")) << "print('ran')\n";
    nodes.push_back(std::make_unique<DdprunProcess>(
        std::vector<std::string>{"--rdzv-backend=c10d", endpoint, "--nnodes=2",
                                 dir.file(std::string(where) + "/train.py")},
        std::map<std::string, std::string>{{"PYTHON_EXEC", "/usr/bin/python3"}}));
  }
  for (auto& node : nodes) {
    CHECK(node->wait(60s) == 0);
    CHECK_THAT(node->output(), Catch::Contains("]:ran"));
  }
}

TEST_CASE("hard to break: a progress bar drawn with carriage returns is shown live, prefixed, "
          "and its bytes are kept",
          "[launcher][robust]") {
  TempDir dir;
  const auto go = dir.file("go");
  // tqdm's way: each update starts with '\r'. The worker then blocks reading a FIFO the test
  // writes only after it saw the console line, so that line was shown live.
  const std::string script = "printf '\\rstep 1'; printf '\\rstep 2'; printf '\\rstep 3'; "
                             "read line < " + go + "; "
                             "i=0; while [ $i -lt 2000 ]; do printf '\\r%d' $i; i=$((i+1)); done; "
                             "printf '\\rdone\\n'";
  for (bool pty : {false, true}) {
    INFO((pty ? "console is a terminal" : "console is a pipe"));
    std::filesystem::remove(go);
    REQUIRE(::mkfifo(go.c_str(), 0600) == 0);
    const auto logs = dir.file(pty ? "logs_pty" : "logs_pipe");
    std::vector<std::string> wrapper;
    // Python's pty module gives ddprun a pseudo-terminal for its output, as an interactive
    // user has, and copies what it shows to the test.
    if (pty) {
      wrapper = {"/usr/bin/python3", "-c",
                 "import os, pty, sys; sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))"};
    }
    DdprunProcess p({"--tee=3", "--log-dir=" + logs, "--master-port=0", "--no-python", "sh", "-c",
                     script},
                    {}, wrapper);
    // Shown while the worker still runs, with the prefix each time.
    REQUIRE(p.wait_for_output("[default0]:step 2", 30s));
    // Opening the FIFO waits for the worker's read, which follows the line just seen.
    std::ofstream(go).put('\n');
    REQUIRE(p.wait(60s) == 0);
    const auto out = p.output();
    CHECK_THAT(out, Catch::Contains("[default0]:done"));
    CHECK((pty || out.find('\r') == std::string::npos));  // a pipe gets no carriage return
    // 2000 redraws in a burst are coalesced: the console gets a few of them, not 2000 lines.
    std::size_t redraws = 0;
    for (std::size_t pos = out.find("[default0]:"); pos != std::string::npos;
         pos = out.find("[default0]:", pos + 1)) {
      ++redraws;
    }
    CHECK(redraws < 100);
    // The log keeps every byte.
    std::string expected = "\rstep 1\rstep 2\rstep 3";
    for (int i = 0; i < 2000; ++i) expected += "\r" + std::to_string(i);
    expected += "\rdone\n";
    const auto stdout_log = std::filesystem::recursive_directory_iterator(logs);
    std::string log_text;
    for (const auto& entry : stdout_log) {
      if (entry.path().filename() == "stdout.log") log_text = read_file(entry.path().string());
    }
    CHECK(log_text == expected);
  }
}

TEST_CASE("hard to break: a node out of processes is said so, and the job restarts",
          "[launcher][robust]") {
  if (geteuid() != 0) {
    WARN("not root: cannot run ddprun as another user with a process limit: skipped");
    return;
  }
  // RLIMIT_NPROC counts every thread and process of the user: as uid 65534 with a limit of 24,
  // the agent and its threads start, and some of 64 workers cannot.
  DdprunProcess p({"--nproc-per-node=64", "--max-restarts=1", "--master-port=0", "--no-python",
                   "sleep", "30"},
                  {}, {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "prlimit",
                       "--nproc=24"});
  CHECK(p.wait(120s) == 121);
  const auto out = p.output();
  INFO(out);
  CHECK_THAT(out, Catch::Contains("this node could not start another process"));
  CHECK_THAT(out, Catch::Contains("1 of 1 restarts left") || Catch::Contains("restarting all workers"));
  CHECK_THAT(out, !Catch::Contains("cannot be executed"));
}

TEST_CASE("hard to break: a worker the kernel's OOM killer ends is reported out of memory",
          "[launcher][robust]") {
  // A memory cgroup of its own for the job, with a limit one worker exceeds (cgroup v1, as on
  // this project's machines; v2 is read the same way through memory.events).
  std::string mine;
  {
    std::ifstream self("/proc/self/cgroup");
    for (std::string line; std::getline(self, line);) {
      if (line.find(":memory:") != std::string::npos) mine = line.substr(line.rfind(':') + 1);
    }
  }
  const std::string cgroup =
      "/sys/fs/cgroup/memory" + mine + "/ddprun-oom-test-" + std::to_string(getpid());
  if (mine.empty() || ::mkdir(cgroup.c_str(), 0755) != 0) {
    WARN("no writable cgroup v1 memory hierarchy here: skipped");
    return;
  }
  std::ofstream(cgroup + "/memory.limit_in_bytes") << (96 << 20);
  std::ofstream(cgroup + "/memory.memsw.limit_in_bytes") << (96 << 20);
  {
    DdprunProcess p({"--nproc-per-node=1", "--master-port=0", "--no-python", "python3", "-c",
                     "b = b'x' * (512 << 20)"},
                    {}, {"sh", "-c", "echo $$ > " + cgroup + "/cgroup.procs && exec \"$@\"", "sh"});
    CHECK(p.wait(120s) == 137);
    INFO(p.output());
    CHECK_THAT(p.output(), Catch::Contains("killed by SIGKILL: out of memory (the kernel's OOM killer)"));
  }
  // A SIGKILL from anyone else is not called out of memory. The worker's shell gets "$$"
  // written "$$$$": ddprun, as torchrun, reads "$$" as one "$" (the wrapper's is its own).
  {
    DdprunProcess p({"--nproc-per-node=1", "--master-port=0", "--no-python", "sh", "-c",
                     "kill -9 $$$$"},
                    {}, {"sh", "-c", "echo $$ > " + cgroup + "/cgroup.procs && exec \"$@\"", "sh"});
    CHECK(p.wait(60s) == 137);
    CHECK_THAT(p.output(), Catch::Contains("killed by SIGKILL"));
    CHECK_THAT(p.output(), !Catch::Contains("out of memory"));
  }
  ::rmdir(cgroup.c_str());
}
