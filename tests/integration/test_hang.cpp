// Jobs that stop making progress under the real ddprun binary, with Debian's torch 1.13 (Gloo)
// and gdb: --hang-timeout's verdict, the stacks, the ranks grouped by where they are, the rank
// out of step named, FileTimer served for the real client, and a hang that a restart cures.
// Timeouts here are seconds, never a library's own default; the bounds only catch hangs.

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace fs = std::filesystem;

namespace {

constexpr auto kBound = 120s;

bool gdb_available() { return std::system("gdb --version >/dev/null 2>&1") == 0; }

#define REQUIRE_TORCH_AND_GDB()                                                          \
  if (!torch_available() || !gdb_available()) {                                          \
    WARN("Debian's python3-torch or gdb is not installed: skipped");                     \
    return;                                                                              \
  }

std::map<std::string, std::string> env(std::map<std::string, std::string> extra) {
  extra["PYTHON_EXEC"] = "/usr/bin/python3";
  return extra;
}

std::vector<std::string> job(std::vector<std::string> flags, const std::string& log_dir) {
  flags.push_back("--master-port=" + std::to_string(free_port()));
  flags.push_back("--log-dir=" + log_dir);
  flags.push_back(TORCH_HANG_SCRIPT);
  return flags;
}

// Every stacks.txt under the log directory.
std::vector<fs::path> stack_files(const std::string& log_dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(log_dir)) {
    if (e.path().filename() == "stacks.txt") out.push_back(e.path());
  }
  return out;
}

std::vector<std::string> event_names(const std::string& file) {
  std::vector<std::string> names;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    names.push_back(nlohmann::json::parse(line).at("event").get<std::string>());
  }
  return names;
}

}  // namespace

TEST_CASE("hang: one rank out of the collective is named, the others grouped, exit 122",
          "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  DdprunProcess p(job({"--nproc-per-node=3", "--hang-timeout=5",
                       "--events-file=" + dir.file("events.jsonl")},
                      dir.file("logs")),
                  env({{"HANG_MODE", "sleep"}}));
  REQUIRE(p.wait(kBound) == 122);
  const auto out = p.output();
  CHECK_THAT(out, Contains("hang: no progress from any of 3 ranks for 5s (--hang-timeout)"));
  CHECK_THAT(out, Contains("ranks 0, 2 (2 of 3): in all_reduce, hang.py:43 step()"));
  CHECK_THAT(out, Contains("rank 1 (1 of 3):     in time.sleep, hang.py:38 load_batch()   "
                           "<- not in the collective"));
  CHECK_THAT(out, Contains("out of step: rank 1"));
  // One file per rank, with every Python thread's frames and every thread's native frames.
  const auto files = stack_files(dir.file("logs"));
  REQUIRE(files.size() == 3);
  for (const auto& f : files) {
    const std::string text = read_file(f);
    CHECK_THAT(text, Contains("(main) (most recent call first):"));
    CHECK_THAT(text, Contains("hang.py\", line "));
    CHECK_THAT(text, Contains("--- native ---"));
    CHECK_THAT(text, Contains("(LWP "));
  }
  const auto events = event_names(dir.file("events.jsonl"));
  CHECK(std::count(events.begin(), events.end(), "hang") == 1);
  CHECK(std::count(events.begin(), events.end(), "stacks") == 1);
}

TEST_CASE("hang: every rank blocked, in two different collectives, none marked",
          "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  DdprunProcess p(job({"--nproc-per-node=3", "--hang-timeout=5"}, dir.file("logs")),
                  env({{"HANG_MODE", "mismatch"}}));
  REQUIRE(p.wait(kBound) == 122);
  const auto out = p.output();
  CHECK_THAT(out, Contains("ranks 0, 2 (2 of 3): in all_reduce, hang.py:43 step()"));
  CHECK_THAT(out, Contains("rank 1 (1 of 3):     in broadcast, hang.py:86 main()"));
  CHECK_THAT(out, !Contains("<- not in the collective"));
  CHECK_THAT(out, !Contains("out of step"));
}

TEST_CASE("hang: a job that prints runs past the timeout untouched", "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  // Sixteen lines half a second apart: eight seconds, well past the timeout.
  DdprunProcess p(job({"--nproc-per-node=2", "--hang-timeout=5"}, dir.file("logs")),
                  env({{"HANG_MODE", "chatty"}, {"CHATTY_LINES", "16"}}));
  CHECK(p.wait(kBound) == 0);
  CHECK_THAT(p.output(), !Contains("hang:"));
  CHECK(stack_files(dir.file("logs")).empty());
}

TEST_CASE("hang: a restart cures a transient hang", "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  DdprunProcess p(job({"--nproc-per-node=2", "--hang-timeout=5", "--max-restarts=1",
                       "--events-file=" + dir.file("events.jsonl")},
                      dir.file("logs")),
                  env({{"HANG_MODE", "sleep"}, {"HANG_UNTIL_RESTART", "1"}}));
  CHECK(p.wait(kBound) == 0);
  CHECK_THAT(p.output(), Contains("restarting all workers (0 of 1 restarts left)"));
  CHECK_THAT(p.output(), Contains("rank 1 done 2"));
  const auto events = event_names(dir.file("events.jsonl"));
  const auto hang = std::find(events.begin(), events.end(), "hang");
  REQUIRE(hang != events.end());
  CHECK(std::find(hang, events.end(), "restart") != events.end());
}

TEST_CASE("hang: a rank alive outside the collective that timed out on the others is the cause",
          "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  // The process group's own timeout (8 s) ends ranks 0 and 2; rank 1 sleeps on. The verdict
  // names rank 1, not the first rank whose collective timed out.
  DdprunProcess p(job({"--nproc-per-node=3", "--hang-timeout=600"}, dir.file("logs")),
                  env({{"HANG_MODE", "sleep"}, {"PG_TIMEOUT", "8"}}));
  REQUIRE(p.wait(kBound) == 122);
  const auto out = p.output();
  CHECK_THAT(out, Contains("rank 1 alive outside any collective (in time.sleep, hang.py:38 "
                           "load_batch())"));
  CHECK_THAT(out, Contains("rank        1 of 3 (local rank 1)"));
  CHECK_THAT(out, Contains("rank 1 (1 of 3):"));
}

TEST_CASE("hang: without --hang-timeout, a collective's timeout names the rank out of step and "
          "keeps the worker's exit code", "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  // No --log-dir: the run's scratch directory, kept since it holds the stacks.
  TempDir dir;
  DdprunProcess p({"--nproc-per-node=3", "--master-port=" + std::to_string(free_port()),
                   TORCH_HANG_SCRIPT},
                  env({{"HANG_MODE", "sleep"}, {"PG_TIMEOUT", "8"}, {"TMPDIR", dir.path()}}));
  REQUIRE(p.wait(kBound) == 1);
  const auto out = p.output();
  CHECK_THAT(out, Contains("job failed (exit code 1): rank 1 alive outside any collective (in "
                           "time.sleep, hang.py:38 load_batch())"));
  CHECK_THAT(out, Contains("rank 1 (1 of 3):     in time.sleep, hang.py:38 load_batch()   <- "
                           "not in the collective"));
  CHECK_THAT(out, Contains("it holds the stacks the root cause names"));
  CHECK(stack_files(dir.path()).size() == 1);  // the one rank still alive
}

TEST_CASE("hang: an ordinary crash takes no stacks without --hang-timeout", "[hang]") {
  TempDir dir;
  // Rank 0 still alive when rank 1 fails with an error that is no collective's timeout.
  DdprunProcess p({"--nproc-per-node=2", "--log-dir=" + dir.file("logs"), "--master-port=0",
                   "--no-python", "sh", "-c",
                   "if [ \"$RANK\" = 1 ]; then echo 'ValueError: bad batch' >&2; exit 3; fi; "
                   "exec sleep 600"});
  REQUIRE(p.wait(kBound) == 3);
  CHECK_THAT(p.output(), !Contains("took the stacks"));
  CHECK(stack_files(dir.file("logs")).empty());
}

TEST_CASE("hang: a rank SIGKILLed while the others wait stays the root cause", "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  DdprunProcess p(job({"--nproc-per-node=3", "--hang-timeout=600"}, dir.file("logs")),
                  env({{"HANG_MODE", "kill"}}));
  REQUIRE(p.wait(kBound) == 137);
  CHECK_THAT(p.output(), Contains("rank        1 of 3 (local rank 1)"));
  CHECK_THAT(p.output(), Contains("killed by SIGKILL"));
}

TEST_CASE("hang: FileTimer requests from torch's own client, an expiry is the rank's hang",
          "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  DdprunProcess p(job({"--nproc-per-node=2"}, dir.file("logs")),
                  env({{"HANG_MODE", "timer"}, {"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}));
  REQUIRE(p.wait(kBound) == 122);
  const auto out = p.output();
  CHECK_THAT(out, Contains("rank 0 left the timed block"));
  CHECK_THAT(out, !Contains("rank 1 left the timed block"));
  CHECK_THAT(out, Contains("rank 1: timer '"));
  CHECK_THAT(out, Contains("expired"));
  CHECK_THAT(out, Contains("rank        1 of 2 (local rank 1)"));
  // The FIFO was made in the job's log directory and is gone with the job.
  CHECK_THAT(out, Contains("serving FileTimer requests at " + dir.file("logs")));
  for (const auto& e : fs::recursive_directory_iterator(dir.file("logs"))) {
    CHECK(e.path().filename() != "timer.fifo");
  }
  CHECK(stack_files(dir.file("logs")).size() == 2);
}

TEST_CASE("hang: a silent step inside a FileTimer block is not a hang", "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  // Eight silent seconds, past a 5-s hang timeout, in a block whose timer allows 60. The
  // timeout leaves room for a loaded machine's `import torch`, which holds the GIL so long that
  // hang.py's "starting" lines may not come for seconds.
  DdprunProcess p(job({"--nproc-per-node=1", "--hang-timeout=5"}, dir.file("logs")),
                  env({{"HANG_MODE", "timed_step"}, {"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}));
  CHECK(p.wait(kBound) == 0);
  CHECK_THAT(p.output(), Contains("step done"));
  CHECK_THAT(p.output(), !Contains("hang:"));
}

TEST_CASE("hang: two agents reach one verdict", "[hang][torch]") {
  REQUIRE_TORCH_AND_GDB();
  TempDir dir;
  const auto port = "--master-port=" + std::to_string(free_port());
  const auto flags = [&](int node, int nproc) {
    return std::vector<std::string>{"--nnodes=2", "--node-rank=" + std::to_string(node),
                                    "--nproc-per-node=" + std::to_string(nproc),
                                    "--master-addr=127.0.0.1", port, "--hang-timeout=5",
                                    "--log-dir=" + dir.file("n" + std::to_string(node)),
                                    TORCH_HANG_SCRIPT};
  };
  // Rank 2, node 1's only rank, is the one out of step.
  DdprunProcess n0(flags(0, 2), env({{"HANG_MODE", "sleep"}, {"HANG_RANK", "2"}}));
  DdprunProcess n1(flags(1, 1), env({{"HANG_MODE", "sleep"}, {"HANG_RANK", "2"}}));
  REQUIRE(n0.wait(kBound) == 122);
  REQUIRE(n1.wait(kBound) == 122);
  for (const auto* p : {&n0, &n1}) {
    const auto out = p->output();
    CHECK_THAT(out, Contains("ranks 0, 1 (2 of 3): in all_reduce, hang.py:43 step()"));
    CHECK_THAT(out, Contains("rank 2 (1 of 3):     in time.sleep, hang.py:38 load_batch()"));
    CHECK_THAT(out, Contains("rank        2 of 3 (local rank 0)"));
  }
  CHECK(stack_files(dir.file("n0")).size() == 2);
  CHECK(stack_files(dir.file("n1")).size() == 1);
}

TEST_CASE("hang: a native worker's stacks (no Python)", "[hang]") {
  if (!gdb_available()) {
    WARN("gdb is not installed: skipped");
    return;
  }
  TempDir dir;
  DdprunProcess p({"--nproc-per-node=2", "--hang-timeout=1", "--log-dir=" + dir.file("logs"),
                   "--no-python", FAKE_WORKER_BINARY},
                  {{"FAKE_MODE", "sleep:600000"}});
  REQUIRE(p.wait(kBound) == 122);
  CHECK_THAT(p.output(), Contains("ranks 0, 1 (2 of 2): in "));
  const auto files = stack_files(dir.file("logs"));
  REQUIRE(files.size() == 2);
  const std::string text = read_file(files[0]);
  CHECK_THAT(text, Contains("--- native ---"));
  CHECK_THAT(text, !Contains("--- python ---"));
  CHECK_THAT(text, Contains("sleep_ms"));
}

TEST_CASE("hang: without gdb on PATH, said at start and at the verdict, which still comes",
          "[hang]") {
  TempDir dir;
  DdprunProcess p({"--nproc-per-node=2", "--hang-timeout=1", "--log-dir=" + dir.file("logs"),
                   "--no-python", FAKE_WORKER_BINARY},
                  {{"FAKE_MODE", "sleep:600000"}, {"PATH", dir.path()}});
  REQUIRE(p.wait(kBound) == 122);
  const auto out = p.output();
  CHECK(count_of(out, "--hang-timeout: a hang will name its ranks without their stacks: no "
                      "debugger: gdb is not on PATH") == 1);
  CHECK_THAT(out, Contains("no stacks of 2 of 2 live worker(s): no debugger: gdb is not on PATH"));
  CHECK_THAT(out, !Contains("took the stacks"));
  CHECK_THAT(out, Contains("hang        no progress from any of 2 ranks"));
  CHECK(stack_files(dir.file("logs")).empty());
}

TEST_CASE("hang: a worker stopped by SIGSTOP is named so, and continued to end in a moment",
          "[hang]") {
  // With or without gdb: the stop is the agent's own knowledge of its child, not the stack's.
  TempDir dir;
  // A grace of 10 minutes: a stopped worker with a handler for SIGTERM acts on it only once
  // continued, and would otherwise take all of it. The shell gets "$$" written "$$$$": ddprun,
  // as torchrun, reads "$$" as one "$".
  DdprunProcess p({"--nproc-per-node=2", "--hang-timeout=1", "--shutdown-timeout=600",
                   "--log-dir=" + dir.file("logs"), "--master-port=0", "--no-python", "sh", "-c",
                   "trap 'exit 0' TERM; echo up; if [ \"$RANK\" = 1 ]; then kill -STOP $$$$; fi; "
                   "sleep 600 & wait"});
  REQUIRE(p.wait(kBound) == 122);
  const auto out = p.output();
  CHECK_THAT(out, Contains("rank 1 (1 of 2): stopped by SIGSTOP"));
  CHECK_THAT(out, Contains("rank 0 (1 of 2): "));
  CHECK_THAT(out, !Contains("rank 0 (1 of 2): stopped"));
  CHECK_THAT(out, Contains("is stopped by SIGSTOP: continuing it so that it acts on SIGTERM"));
  CHECK_THAT(out, !Contains("still running after the grace period"));
}

TEST_CASE("hang: stacks taken by an agent that is not root", "[hang]") {
  if (!gdb_available() || ::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    WARN("needs gdb, root (to become another user) and setpriv: skipped");
    return;
  }
  // As user nobody, its workers its own: gdb may attach to them. Where Yama restricts ptrace
  // to descendants (ptrace_scope 1), the workers' PR_SET_PTRACER naming the agent is what
  // lets the agent's debugger in; this machine may not have Yama at all.
  TempDir dir;
  // Writable by nobody, and sticky as /tmp is, as a log directory must be (launcher/log_dir.cpp).
  ::chmod(dir.path().c_str(), 01777);
  DdprunProcess p({"--nproc-per-node=2", "--hang-timeout=1", "--log-dir=" + dir.file("logs"),
                   "--no-python", FAKE_WORKER_BINARY},
                  {{"FAKE_MODE", "sleep:600000"}},
                  {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"});
  REQUIRE(p.wait(kBound) == 122);
  CHECK_THAT(p.output(), Contains("ranks 0, 1 (2 of 2): in "));
  CHECK_THAT(p.output(), !Contains("no stack"));
  const auto files = stack_files(dir.file("logs"));
  REQUIRE(files.size() == 2);
  struct stat st {};
  REQUIRE(::stat(files[0].c_str(), &st) == 0);
  CHECK(st.st_uid == 65534);
}
