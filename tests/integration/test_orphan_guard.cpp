// OrphanGuard with real processes: a stand-in agent (a forked copy of this test) starts fake
// workers under a guard, and is SIGKILLed or ends; nothing it started may outlive it, and its
// scratch directory goes with it unless the agent still lives.

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>

#include "process/orphan_guard.hpp"
#include "process/posix_process_runner.hpp"
#include "testing/fake_worker_launch.hpp"
#include "testing/test_util.hpp"

using namespace std::chrono_literals;
using ddprun::PosixProcessRunner;
using ddprun::test::ExitLog;
using ddprun::test::Fake;
using ddprun::test::process_alive;
using ddprun::test::process_state;
using ddprun::test::read_pids;
using ddprun::test::TempDir;
using ddprun::test::wait_until;

namespace {

// Hang detectors only; a healthy run takes milliseconds.
constexpr auto kBound = 20s;

// Forks a stand-in agent that runs `body` and exits with the code it returns (1 when it
// throws); it never returns into Catch2. Catch2 runs the tests on one thread, and this process
// has no runner of its own, so forking is safe.
pid_t stand_in_agent(const std::function<int()>& body) {
  std::cout.flush();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 1;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);
  }
  REQUIRE(pid > 0);
  return pid;
}

// The code a stand-in agent that ends by itself exited with, within `bound`.
int stand_in_code(pid_t agent, std::chrono::milliseconds bound) {
  const int status = ddprun::test::wait_for_exit(agent, bound);
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

// What a stand-in agent does once it has started what it starts: nothing, until the test kills
// it.
[[noreturn]] int wait_to_be_killed() {
  while (true) ::pause();
}

// Writes "pid\n" to `path` at once (through a rename), for the test to read.
void write_pid(const std::string& path, pid_t pid) {
  std::ofstream(path + ".tmp") << pid << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

TEST_CASE("no worker or grandchild outlives a SIGKILLed agent that has an OrphanGuard",
          "[runner][orphan]") {
  TempDir dir;
  const auto pid_file = dir.file("pids");
  const auto guardian_file = dir.file("guardian");
  // A scratch directory like a run's (its attempt's and workers' directories, files in them,
  // a link that must not be followed), which the guardian removes when the agent dies.
  const auto scratch = dir.file("scratch");
  const auto kept = dir.file("kept");
  std::filesystem::create_directories(scratch + "/run/attempt_0/0");
  std::filesystem::create_directories(scratch + "/run/attempt_0/1");
  std::filesystem::create_directories(kept);
  std::ofstream(scratch + "/run/attempt_0/0/error.json") << "{}";
  std::ofstream(kept + "/file") << "stays";
  std::filesystem::create_directory_symlink(kept, scratch + "/run/attempt_0/1/link");
  const pid_t agent = stand_in_agent([&] {
    ddprun::OrphanGuard guard;
    guard.remove_if_abandoned(scratch);
    PosixProcessRunner runner(&guard);
    runner.start({Fake("grandchild").env("FAKE_PID_FILE", pid_file).launch()}, {});
    // start() returns once the worker has told the guardian its group (before its exec).
    write_pid(guardian_file, guard.guardian_pid());
    return wait_to_be_killed();
  });

  const bool ready = wait_until([&] {
    return read_pids(pid_file).size() >= 2 && read_pids(guardian_file).size() == 1;
  }, kBound);
  if (!ready) {
    ::kill(agent, SIGKILL);
    ddprun::test::wait_for_exit(agent, kBound);
    FAIL("the stand-in agent did not start its worker and guardian");
  }
  const auto family = read_pids(pid_file);
  const pid_t worker = family[0];
  const pid_t grandchild = family[1];
  const pid_t guardian = read_pids(guardian_file)[0];
  CHECK(process_alive(worker));
  CHECK(process_alive(grandchild));
  CHECK(process_alive(guardian));

  ::kill(agent, SIGKILL);
  const int status = ddprun::test::wait_for_exit(agent, kBound);
  REQUIRE(status != -1);
  CHECK(WIFSIGNALED(status));

  // The worker dies of its parent-death signal; the grandchild, which ignores SIGTERM and has
  // no parent-death signal, only through the guardian; then the guardian exits.
  const bool all_gone = wait_until([&] {
    return !process_alive(worker) && !process_alive(grandchild) && !process_alive(guardian);
  }, 10s);
  CHECK_FALSE(process_alive(worker));
  CHECK_FALSE(process_alive(grandchild));
  CHECK_FALSE(process_alive(guardian));
  if (!all_gone) {  // leave nothing behind, even on failure
    ::kill(-worker, SIGKILL);
    ::kill(grandchild, SIGKILL);
    ::kill(guardian, SIGKILL);
  }
  // Its exit came after the scratch directory's removal; the link's target is untouched.
  CHECK_FALSE(std::filesystem::exists(scratch));
  CHECK(std::filesystem::exists(kept + "/file"));
}

TEST_CASE("a grandchild without the guard's marker dies with a SIGKILLed agent: the worker "
          "stored its group in the guard's memory", "[runner][orphan]") {
  TempDir dir;
  const auto pid_file = dir.file("pids");
  const pid_t agent = stand_in_agent([&] {
    ddprun::OrphanGuard guard;
    PosixProcessRunner runner(&guard);
    runner.start({Fake("grandchild_bare").env("FAKE_PID_FILE", pid_file).launch()}, {});
    return wait_to_be_killed();
  });
  // Ready once the grandchild runs sleep with an empty environment: the marker sweep cannot
  // find it, and it ignores SIGTERM and has no parent-death signal; only a kill of the worker's
  // group reaches it, and only the guardian's slots know that group once the agent is gone.
  pid_t worker = -1;
  pid_t grandchild = -1;
  const bool ready = wait_until([&] {
    const auto family = read_pids(pid_file);
    if (family.size() < 2) return false;
    worker = family[0];
    grandchild = family[1];
    std::ifstream comm("/proc/" + std::to_string(grandchild) + "/comm");
    std::string name;
    return std::getline(comm, name) && name == "sleep";
  }, kBound);
  if (!ready) {
    ::kill(agent, SIGKILL);
    ddprun::test::wait_for_exit(agent, kBound);
    if (worker > 0) ::kill(-worker, SIGKILL);
    FAIL("the stand-in agent's worker did not start its bare grandchild");
  }
  ::kill(agent, SIGKILL);
  REQUIRE(ddprun::test::wait_for_exit(agent, kBound) != -1);
  const bool gone =
      wait_until([&] { return !process_alive(worker) && !process_alive(grandchild); }, 10s);
  CHECK_FALSE(process_alive(worker));
  CHECK_FALSE(process_alive(grandchild));
  if (!gone) ::kill(-worker, SIGKILL);  // leave nothing behind, even on failure
}

TEST_CASE("a guardian told of an unclean end leaves the scratch directory to its living agent",
          "[runner][orphan]") {
  TempDir dir;
  const auto scratch = dir.file("scratch");
  std::filesystem::create_directories(scratch + "/run");
  const pid_t agent = stand_in_agent([&] {
    int code = 0;
    try {
      ddprun::OrphanGuard guard;
      guard.remove_if_abandoned(scratch);
      // A child of the agent's own that is not the guardian: the end is not clean, so the
      // guardian kills and sweeps, and finish() waits for it.
      const pid_t child = ::fork();
      if (child == 0) {
        ::close(guard.fd());  // or the guardian's pipe never closes
        wait_to_be_killed();
      }
      guard.finish();
      if (!std::filesystem::exists(scratch + "/run")) code = 10;
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    } catch (...) {
      code = 11;
    }
    return code;
  });
  const int code = stand_in_code(agent, kBound);
  INFO("10: the guardian removed the living agent's scratch directory; 11: an exception");
  CHECK(code == 0);
}

TEST_CASE("told of a clean end, the guardian exits before its agent reaps it", "[runner][orphan]") {
  // The guard makes the stand-in agent's process a subreaper. Its exit code says what it saw.
  const pid_t agent = stand_in_agent([&] {
    int code = 0;
    try {
      pid_t guardian = -1;
      {
        ddprun::OrphanGuard guard;
        guardian = guard.guardian_pid();
        {
          ExitLog log;
          PosixProcessRunner runner(&guard);
          runner.start({Fake("succeed").launch()}, log.callback());
          if (!log.wait_for(1)) code = 10;
        }
        if (process_state(guardian) == 'Z') code = 11;  // it must wait for the agent's word
        guard.finish();
        // Exited by itself: only this process can reap it, and nothing here has yet.
        if (code == 0 && !wait_until([&] { return process_state(guardian) == 'Z'; }, kBound)) {
          code = 12;
        }
      }
      if (code == 0 && ::kill(guardian, 0) == 0) code = 13;  // the guard reaped it
    } catch (...) {
      code = 14;
    }
    return code;
  });
  const int code = stand_in_code(agent, kBound);
  INFO("10: the worker's exit was not reported; 11: the guardian left before finish(); 12: it "
       "did not exit after finish(); 13: the guard did not reap it; 14: an exception");
  CHECK(code == 0);
}

TEST_CASE("a daemon that left the worker's session does not outlive a SIGKILLed agent",
          "[runner][orphan]") {
  TempDir dir;
  const auto pid_file = dir.file("pids");
  const auto guardian_file = dir.file("guardian");
  const pid_t agent = stand_in_agent([&] {
    ddprun::OrphanGuard guard;
    PosixProcessRunner runner(&guard);
    // The worker starts a daemon (setsid: another session and group, SIGTERM ignored) and
    // hangs; neither the worker's group nor the subreaper reaches the daemon once the agent is
    // SIGKILLed: only the marker in its environment does.
    runner.start({Fake("daemon_hang").env("FAKE_PID_FILE", pid_file).launch()}, {});
    write_pid(guardian_file, guard.guardian_pid());
    return wait_to_be_killed();
  });

  const bool ready = wait_until([&] {
    return !read_pids(pid_file).empty() && read_pids(guardian_file).size() == 1;
  }, kBound);
  if (!ready) {
    ::kill(agent, SIGKILL);
    ddprun::test::wait_for_exit(agent, kBound);
    FAIL("the stand-in agent did not start its worker's daemon and the guardian");
  }
  const pid_t daemon = read_pids(pid_file)[0];
  const pid_t guardian = read_pids(guardian_file)[0];
  REQUIRE(process_alive(daemon));
  CHECK(::getsid(daemon) == daemon);  // really in a session of its own

  ::kill(agent, SIGKILL);
  REQUIRE(ddprun::test::wait_for_exit(agent, kBound) != -1);

  const bool gone =
      wait_until([&] { return !process_alive(daemon) && !process_alive(guardian); }, 10s);
  CHECK_FALSE(process_alive(daemon));
  CHECK_FALSE(process_alive(guardian));
  if (!gone) {
    ::kill(daemon, SIGKILL);
    ::kill(guardian, SIGKILL);
  }
}

TEST_CASE("a daemon the workers left running is ended before the next attempt's workers start",
          "[runner][orphan]") {
  TempDir dir;
  const auto pid_file = dir.file("pids");
  const pid_t agent = stand_in_agent([&] {
    // A child in a session of its own that is not the workers', as an sshd that a container's
    // entrypoint started is to an agent that is the container's first process.
    const pid_t foreign = ::fork();
    if (foreign < 0) return 15;
    if (foreign == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::setsid();
      while (true) ::pause();
    }
    ddprun::OrphanGuard guard;
    PosixProcessRunner runner(&guard);
    ExitLog first;
    runner.start({Fake("daemon_hang").env("FAKE_PID_FILE", pid_file).launch()},
                 first.callback());
    if (!wait_until([&] { return !read_pids(pid_file).empty(); }, kBound)) return 10;
    const pid_t daemon = read_pids(pid_file)[0];
    runner.stop(SIGTERM, 5s);
    if (!process_alive(daemon)) return 11;  // no stop reaches it: it left the worker's session
    ExitLog second;
    runner.start({Fake("hang").restart(1).launch()}, second.callback());
    if (process_alive(daemon)) return 12;
    if (::kill(daemon, 0) == 0) return 13;  // ended, and collected too
    if (!process_alive(foreign)) return 14;
    runner.stop(SIGTERM, 5s);
    ::kill(foreign, SIGKILL);
    ::waitpid(foreign, nullptr, 0);
    return 0;
  });
  const int code = stand_in_code(agent, kBound);
  INFO("10: no daemon started; 11: the stop ended it; 12: it outlived the next start; 13: left "
       "a zombie; 14: a process of another session that is not the workers' was ended; 15: fork "
       "failed");
  CHECK(code == 0);
}

TEST_CASE("a worker's descendant that outlived its parent is collected when it exits, while "
          "the worker runs", "[runner][orphan]") {
  TempDir dir;
  const auto pid_file = dir.file("orphan");
  const pid_t agent = stand_in_agent([&] {
    ddprun::OrphanGuard guard;
    PosixProcessRunner runner(&guard);
    // The inner shell leaves a short sleep behind and exits: the sleep comes to this process
    // (the subreaper) and exits while the worker runs on.
    ddprun::WorkerLaunch launch;
    launch.argv = {"/bin/sh", "-c",
                   "sh -c 'sleep 0.2 & echo $! > " + pid_file + "'; exec sleep 1000"};
    launch.env = {"PATH=/usr/bin:/bin"};
    ExitLog log;
    runner.start({launch}, log.callback());
    if (!wait_until([&] { return !read_pids(pid_file).empty(); }, kBound)) return 10;
    const pid_t orphan = read_pids(pid_file)[0];
    if (!wait_until([&] { return ::kill(orphan, 0) != 0; }, kBound)) {
      return process_state(orphan) == 'Z' ? 11 : 12;
    }
    if (!log.exits().empty()) return 13;
    runner.stop(SIGTERM, 5s);
    return 0;
  });
  const int code = stand_in_code(agent, 2 * kBound);
  INFO("10: no pid written; 11: its zombie was never collected; 12: it did not exit; 13: the "
       "worker ended");
  CHECK(code == 0);
}
