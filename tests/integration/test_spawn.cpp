// spawn_process with real programs: what the child gets between clone and exec (its own
// group, streams, environment, no inherited descriptors, a clean signal state, the guard's
// announcement, death with the starting thread) and exec failures reported synchronously.

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "common/error.hpp"
#include "process/spawn.hpp"
#include "testing/test_util.hpp"

using namespace std::chrono_literals;
using ddprun::ChildPipe;
using ddprun::SpawnError;
using ddprun::SpawnRequest;
using ddprun::spawn_process;
using ddprun::test::wait_for_exit;

namespace {

// Everything `fd` delivers until its end (the writers are gone), within `limit`.
std::string read_all(int fd, std::chrono::seconds limit = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string text;
  char buf[4096];
  for (auto now = std::chrono::steady_clock::now(); now < deadline;
       now = std::chrono::steady_clock::now()) {
    // A read only once data or the end is there: a child that hangs cannot outlast `limit`.
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  return text;
}

// Runs the request's program with its stdout on a pipe; returns what it printed, after its
// exit 0.
std::string run_program(SpawnRequest request) {
  ChildPipe out;
  out.open();
  request.stdout_fd = out.write_end();
  const pid_t pid = spawn_process(request);
  out.close_write();
  const std::string text = read_all(out.read_end());
  const int status = wait_for_exit(pid, 30s);
  INFO("program: " << request.path << "\noutput: " << text);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return text;
}

// `sh -c SCRIPT`, as run_program.
std::string run_shell(const std::string& script, SpawnRequest request = {}) {
  request.path = "/bin/sh";
  request.argv = {"sh", "-c", script};
  return run_program(std::move(request));
}

}  // namespace

TEST_CASE("spawn: a missing or non-executable program fails in the call, with nothing left",
          "[spawn]") {
  ddprun::test::TempDir dir;
  const std::string plain = dir.file("not_executable");
  std::FILE* file = std::fopen(plain.c_str(), "w");
  REQUIRE(file != nullptr);
  std::fclose(file);
  for (const auto& [path, error] : {std::pair{dir.file("missing"), ENOENT}, {plain, EACCES}}) {
    SpawnRequest request;
    request.path = path;
    request.argv = {path};
    try {
      spawn_process(request);
      FAIL("no error for " << path);
    } catch (const SpawnError& e) {
      CHECK(e.error() == error);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
    // The failed child was reaped by the call: this process has no child left.
    CHECK(waitpid(-1, nullptr, WNOHANG) == -1);
    CHECK(errno == ECHILD);
  }
}

TEST_CASE("spawn: own process group, the given environment, argv and stdout", "[spawn]") {
  SpawnRequest request;
  request.env = std::vector<std::string>{"ONLY_THIS=1", "PATH=/usr/bin:/bin"};
  const auto text = run_shell("echo \"$0 $$ $(ps -o pgid= -p $$) $ONLY_THIS ${HOME:-none}\"",
                              request);
  std::istringstream in(text);
  std::string arg0;
  long pid = 0;
  long pgid = 0;
  std::string only;
  std::string home;
  in >> arg0 >> pid >> pgid >> only >> home;
  CHECK(arg0 == "sh");
  CHECK(pid == pgid);  // leads a group of its own
  CHECK(pgid != getpgrp());
  CHECK(only == "1");
  CHECK(home == "none");  // nothing but the given environment
}

TEST_CASE("spawn: without an environment the child gets this process's own", "[spawn]") {
  setenv("DDPRUN_SPAWN_TEST", "inherited", 1);
  CHECK(run_shell("echo $DDPRUN_SPAWN_TEST") == "inherited\n");
  unsetenv("DDPRUN_SPAWN_TEST");
}

TEST_CASE("spawn: no descriptor above stderr reaches the program", "[spawn]") {
  // A descriptor without close-on-exec, as a library might leave one.
  const int leaky = open("/dev/null", O_RDONLY);
  REQUIRE(leaky > 2);
  const auto text = run_shell("[ -e /proc/$$/fd/" + std::to_string(leaky) +
                              " ] && echo inherited || echo closed");
  close(leaky);
  CHECK(text == "closed\n");
}

TEST_CASE("spawn: the program starts with no blocked or ignored signal", "[spawn]") {
  // This process: SIGPIPE ignored, SIGUSR1 handled, SIGUSR2 blocked on this thread.
  auto old_pipe = signal(SIGPIPE, SIG_IGN);
  auto old_usr1 = signal(SIGUSR1, [](int) {});
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &usr2, &old_mask);
  // grep reads its own status: the state it was started with (a shell in between would
  // block signals around its own forks).
  SpawnRequest request;
  request.path = "/bin/grep";
  request.argv = {"grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"};
  const auto text = run_program(request);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  signal(SIGUSR1, old_usr1);
  signal(SIGPIPE, old_pipe);
  INFO(text);
  CHECK(text.find("SigBlk:\t0000000000000000") != std::string::npos);
  CHECK(text.find("SigIgn:\t0000000000000000") != std::string::npos);
  // (Handlers need no check here: exec itself resets them, and grep installs its own.)
}

TEST_CASE("spawn: the child stores its pid in the guard's slot before exec", "[spawn]") {
  pid_t slot = 0;
  SpawnRequest request;
  request.path = "/bin/true";
  request.argv = {"true"};
  request.announce_slot = &slot;
  const pid_t pid = spawn_process(request);
  // spawn_process returns once the child has called exec, after its store.
  CHECK(std::atomic_ref<pid_t>(slot).load() == pid);
  CHECK(WIFEXITED(wait_for_exit(pid, 30s)));
}

TEST_CASE("spawn: the child dies with the thread that started it", "[spawn]") {
  pid_t pid = -1;
  std::thread starter([&] {
    SpawnRequest request;
    request.path = "/bin/sleep";
    request.argv = {"sleep", "60"};
    pid = spawn_process(request);
  });
  starter.join();
  REQUIRE(pid > 0);
  const int status = wait_for_exit(pid, 30s);
  REQUIRE(status != -1);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}
