// PosixProcessRunner with real processes: the fake worker's modes stand in for training scripts
// that succeed, fail, crash, hang, print, or leave grandchildren behind. The orphan guard's
// tests are in test_orphan_guard.cpp.
// Time bounds are generous: they catch hangs, they do not measure speed.

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "agent/worker_env.hpp"
#include "common/error.hpp"
#include "process/console_writer.hpp"
#include "process/posix_process_runner.hpp"
#include "testing/fake_worker_launch.hpp"
#include "testing/test_util.hpp"

using namespace std::chrono_literals;
using ddprun::PosixProcessRunner;
using ddprun::WorkerExit;
using ddprun::WorkerLaunch;
using ddprun::test::ExitLog;
using ddprun::test::Fake;
using ddprun::test::process_alive;
using ddprun::test::process_state;
using ddprun::test::read_pids;
using ddprun::test::read_lines;
using ddprun::test::TempDir;
using ddprun::test::wait_until;
using Catch::Matchers::Contains;

namespace {

// Hang detectors only; a healthy run takes milliseconds.
constexpr auto kBound = 20s;

// Waits until fake workers of local ranks 0 and 1 (FAKE_TOUCH_DIR=dir) are past exec and in
// their own code.
bool both_started(const TempDir& dir) {
  return wait_until([&] {
    return ddprun::test::file_exists(dir.file("started_0_0")) &&
           ddprun::test::file_exists(dir.file("started_1_0"));
  }, kBound);
}

bool tail_contains(const WorkerExit& e, const std::string& text) {
  return std::any_of(e.stderr_tail.begin(), e.stderr_tail.end(),
                     [&](const std::string& line) { return line.find(text) != std::string::npos; });
}

std::vector<std::string> expected_lines(int count, int rank, const std::string& prefix = "") {
  std::vector<std::string> lines;
  for (int i = 1; i <= count; ++i) {
    lines.push_back(prefix + "line " + std::to_string(i) + " of " + std::to_string(count) +
                    " from rank " + std::to_string(rank));
  }
  return lines;
}

// Sends this process's stdout (fd 1) to `fd`, which it takes over, until destroyed.
class StdoutTo {
 public:
  explicit StdoutTo(int fd) {
    std::cout.flush();
    std::fflush(stdout);
    saved_ = ::dup(STDOUT_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    ::close(fd);
  }
  ~StdoutTo() {
    std::fflush(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
  }
  StdoutTo(const StdoutTo&) = delete;
  StdoutTo& operator=(const StdoutTo&) = delete;

 private:
  int saved_ = -1;
};

// `path`, created or emptied, open for writing (for StdoutTo).
int new_file(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// A process that traces `target` (PTRACE_SEIZE) and never waits for it, as a debugger that
// does not let go: once killed, the target is a zombie only this tracer may collect. It lets
// go (exits, detaching) on release() or when destroyed.
class Tracer {
 public:
  explicit Tracer(pid_t target) {
    int ready[2];
    int hold[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(hold, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(ready[0]);
      ::close(hold[1]);
      const int result = ::ptrace(PTRACE_SEIZE, target, nullptr, nullptr) == 0 ? 0 : errno;
      (void)!::write(ready[1], &result, sizeof(result));
      char c;
      (void)!::read(hold[0], &c, 1);  // end of file: the test let go
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(hold[0]);
    hold_ = hold[1];
    int result = -1;
    (void)!::read(ready[0], &result, sizeof(result));
    ::close(ready[0]);
    error_ = result;
  }
  ~Tracer() { release(); }
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  pid_t pid() const { return pid_; }
  int error() const { return error_; }  // 0: it traces the target
  void release() {
    if (hold_ < 0) return;
    ::close(hold_);
    hold_ = -1;
    ::waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
  int error_ = 0;
};

}  // namespace

TEST_CASE("exit codes are reported per worker", "[runner]") {
  ExitLog log;
  PosixProcessRunner runner;
  const auto pids = runner.start({Fake("succeed").rank(0, 3).launch(),
                                  Fake("exit:3").rank(1, 3).launch(),
                                  Fake("exit:255").rank(2, 3).launch()},
                                 log.callback());
  REQUIRE(pids.size() == 3);
  REQUIRE(log.wait_for(3));
  const auto exits = log.exits();
  const int codes[] = {0, 3, 255};
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("local rank " << i);
    CHECK(exits[i].local_rank == static_cast<int>(i));
    CHECK(exits[i].rank == static_cast<int>(i));
    CHECK(exits[i].pid == pids[i]);
    CHECK(exits[i].signal == 0);
    CHECK(exits[i].exit_code == codes[i]);
    CHECK(exits[i].shell_code() == codes[i]);
    CHECK(exits[i].succeeded() == (codes[i] == 0));
  }
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("a segfault is reported as SIGSEGV, shell code 139, with its stderr", "[runner]") {
  ExitLog log;
  PosixProcessRunner runner;
  runner.start({Fake("segfault").launch()}, log.callback());
  REQUIRE(log.wait_for(1));
  const auto e = log.exits().at(0);
  CHECK(e.signal == SIGSEGV);
  CHECK(e.exit_code == 0);
  CHECK(e.shell_code() == 139);
  CHECK_FALSE(e.succeeded());
  CHECK(tail_contains(e, "raising SIGSEGV"));
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("an exit is noticed promptly while a sibling keeps running", "[runner]") {
  ExitLog log;
  PosixProcessRunner runner;
  const auto started = ddprun::Clock::now();
  const auto pids = runner.start(
      {Fake("sleep:50").rank(0, 2).launch(), Fake("hang").rank(1, 2).launch()}, log.callback());
  REQUIRE(log.wait_for(1));
  const auto noticed = ddprun::Clock::now();
  const auto e = log.exits().at(0);
  CHECK(e.local_rank == 0);
  CHECK(e.succeeded());
  CHECK(noticed - started >= 50ms);
  CHECK(e.when >= started);
  CHECK(e.when <= noticed);
  CHECK(process_alive(pids[1]));
  runner.stop(SIGTERM, 5s);
  REQUIRE(log.wait_for(2));
  CHECK(log.exits().at(1).signal == SIGTERM);
}

TEST_CASE("stop(SIGTERM) ends hanging workers and reports signal 15", "[runner]") {
  TempDir dir;
  ExitLog log;
  PosixProcessRunner runner;
  const auto pids =
      runner.start({Fake("hang").rank(0, 2).env("FAKE_TOUCH_DIR", dir.path()).launch(),
                    Fake("hang").rank(1, 2).env("FAKE_TOUCH_DIR", dir.path()).launch()},
                   log.callback());
  // Both are past exec and in their own code before the signal goes out.
  REQUIRE(both_started(dir));

  runner.stop(SIGTERM, 30s);
  // stop() returns only after every worker was reported.
  const auto exits = log.exits();
  REQUIRE(exits.size() == 2);
  for (const auto& e : exits) {
    INFO("local rank " << e.local_rank);
    CHECK(e.signal == SIGTERM);
    CHECK(e.shell_code() == 143);
  }
  CHECK_FALSE(process_alive(pids[0]));
  CHECK_FALSE(process_alive(pids[1]));
}

TEST_CASE("a worker that ignores SIGTERM is SIGKILLed after the grace period", "[runner]") {
  TempDir dir;
  ExitLog log;
  PosixProcessRunner runner;
  const auto pids = runner.start(
      {Fake("stubborn").env("FAKE_TOUCH_DIR", dir.path()).launch()},
      log.callback());
  REQUIRE(wait_until([&] { return ddprun::test::file_exists(dir.file("started_0_0")); }, kBound));

  const auto before = ddprun::Clock::now();
  runner.stop(SIGTERM, 500ms);
  CHECK(ddprun::Clock::now() - before >= 500ms);
  REQUIRE(log.exits().size() == 1);
  CHECK(log.exits()[0].signal == SIGKILL);
  CHECK_FALSE(process_alive(pids[0]));
}

TEST_CASE("a worker that cannot be reaped after SIGKILL is named, and the runner goes on",
          "[runner]") {
  TempDir dir;
  ExitLog first;
  PosixProcessRunner runner;
  const auto pids =
      runner.start({Fake("hang").env("FAKE_TOUCH_DIR", dir.path()).launch()}, first.callback());
  REQUIRE(wait_until([&] { return ddprun::test::file_exists(dir.file("started_0_0")); }, kBound));
  // A debugger holds it: killed, it stays a zombie that only the debugger may collect.
  Tracer tracer(pids[0]);
  if (tracer.error() != 0) {
    WARN("cannot trace the worker (" << std::strerror(tracer.error()) << "): skipped");
    return;
  }

  const auto unreaped = runner.stop(SIGTERM, 200ms);
  REQUIRE(unreaped.size() == 1);
  CHECK(unreaped[0].pid == pids[0]);
  CHECK(unreaped[0].local_rank == 0);
  CHECK_THAT(unreaped[0].whereabouts,
             Contains("state Z") && Contains(fmt::format("traced by pid {}", tracer.pid())));
  CHECK(first.exits().empty());
  // The next stop (the agent's last, the runner's own at its end) does not wait for it again.
  const auto again = ddprun::Clock::now();
  CHECK(runner.stop(SIGKILL, 0s).empty());
  CHECK(ddprun::Clock::now() - again < 5s);

  // Its thread is free: the next start runs and reports as usual.
  ExitLog second;
  runner.start({Fake("exit:2").restart(1).launch()}, second.callback());
  REQUIRE(second.wait_for(1));
  CHECK(second.exits()[0].exit_code == 2);

  // A later stop does not wait for it again.
  const auto before = ddprun::Clock::now();
  CHECK(runner.stop(SIGTERM, 5s).empty());
  CHECK(ddprun::Clock::now() - before < 5s);
  // Once the debugger lets go, the zombie is collected, and reported to nobody: whoever
  // started it may be gone.
  tracer.release();
  CHECK(wait_until([&] { return process_state(pids[0]) == 0; }, kBound));
  CHECK(first.exits().empty());
}

TEST_CASE("stop() spares a worker that is failing on its own: it ends with its own code",
          "[runner]") {
  TempDir dir;
  ExitLog log;
  PosixProcessRunner runner;
  // Rank 0 is "failing": it waits for a file the test writes after stop() began, then exits 7.
  // Rank 1 hangs and gets the signal.
  runner.start({Fake("after_file:go:0:7").rank(0, 2).env("FAKE_TOUCH_DIR", dir.path()).launch(),
                Fake("hang").rank(1, 2).env("FAKE_TOUCH_DIR", dir.path()).launch()},
               log.callback());
  REQUIRE(both_started(dir));
  auto stopping = std::async(std::launch::async, [&] { runner.stop(SIGTERM, 30s, {0}); });
  REQUIRE(log.wait_for(1));  // rank 1, by the signal; rank 0 is still waiting for its file
  CHECK(log.exits().at(0).local_rank == 1);
  CHECK(log.exits().at(0).signal == SIGTERM);
  std::ofstream(dir.file("go")) << "\n";
  stopping.get();
  const auto exits = log.exits();  // by local rank
  REQUIRE(exits.size() == 2);
  CHECK(exits.at(0).signal == 0);
  CHECK(exits.at(0).exit_code == 7);
  CHECK(exits.at(1).signal == SIGTERM);
}

TEST_CASE("stop() removes the worker's whole process group, grandchildren too", "[runner]") {
  TempDir dir;
  const auto pid_file = dir.file("pids");
  ExitLog log;
  PosixProcessRunner runner;
  const auto pids = runner.start(
      {Fake("grandchild").env("FAKE_PID_FILE", pid_file).launch()}, log.callback());
  REQUIRE(wait_until([&] { return read_pids(pid_file).size() >= 2; }, kBound));
  const auto family = read_pids(pid_file);
  REQUIRE(family[0] == pids[0]);
  const pid_t grandchild = family[1];
  REQUIRE(process_alive(pids[0]));
  REQUIRE(process_alive(grandchild));

  // The grandchild ignores SIGTERM: only the runner's SIGKILL to the group removes it.
  runner.stop(SIGTERM, 5s);
  REQUIRE(log.exits().size() == 1);
  CHECK(log.exits()[0].signal == SIGTERM);
  const bool gone = wait_until(
      [&] { return !process_alive(pids[0]) && !process_alive(grandchild); }, kBound);
  if (process_alive(grandchild)) ::kill(grandchild, SIGKILL);  // do not leak it on failure
  CHECK(gone);
}

namespace {

int stranger_answer_fd = -1;  // in the stranger: where it answers

void stranger_answer(int) { (void)!::write(stranger_answer_fd, "y", 1); }

// A process that this test starts, leading a process group of its own as a shell's job or a
// daemon does, and that answers SIGUSR1 with a byte on a pipe for as long as it lives.
class Stranger {
 public:
  // Asks the kernel for pid `wanted` (the next pid after ns_last_pid, when free). Not
  // started() when this process may not set the next pid (not root).
  explicit Stranger(pid_t wanted) {
    {
      std::ofstream last("/proc/sys/kernel/ns_last_pid");
      if (!(last << wanted - 1 << std::flush)) return;
    }
    int answers[2];
    REQUIRE(::pipe2(answers, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::setpgid(0, 0);
      stranger_answer_fd = answers[1];
      struct sigaction on_usr1 {};
      on_usr1.sa_handler = stranger_answer;
      ::sigaction(SIGUSR1, &on_usr1, nullptr);
      sigset_t usr1;
      sigemptyset(&usr1);
      sigaddset(&usr1, SIGUSR1);
      ::sigprocmask(SIG_UNBLOCK, &usr1, nullptr);
      stranger_answer(0);  // ready: SIGUSR1 no longer ends it
      while (true) ::pause();
    }
    ::setpgid(pid_, pid_);  // either side may run first
    ::close(answers[1]);
    answers_ = answers[0];
    REQUIRE(read_answer());
  }
  ~Stranger() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(answers_);
  }
  Stranger(const Stranger&) = delete;
  Stranger& operator=(const Stranger&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Whether it still lives: a SIGKILL sent to it earlier comes first, and its end of the
  // pipe closes instead of answering.
  bool answers() {
    ::kill(pid_, SIGUSR1);
    return read_answer();
  }

 private:
  bool read_answer() {
    pollfd p{answers_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kBound).count())) != 1) {
      return false;
    }
    char c = 0;
    return ::read(answers_, &c, 1) == 1;
  }

  pid_t pid_ = -1;
  int answers_ = -1;
};

}  // namespace

TEST_CASE("a worker's process group is ended only while its pid is still its own",
          "[runner]") {
  ExitLog log;
  PosixProcessRunner runner;
  const auto pids = runner.start(
      {Fake("succeed").rank(0, 2).launch(), Fake("hang").rank(1, 2).launch()}, log.callback());
  REQUIRE(log.wait_for(1));
  REQUIRE(log.exits().at(0).local_rank == 0);
  CHECK(process_state(pids[0]) == 'Z');
  // Rank 0 exited and was reported; its group is ended only at the stop below. A process
  // that starts meanwhile, as close to rank 0's pid as the kernel allows, must not get that
  // number (with pid_max 32768 a busy node wraps around within minutes), or the stop's
  // SIGKILL to rank 0's group would reach it.
  Stranger stranger(pids[0]);
  if (!stranger.started()) {
    WARN("skipped: cannot write /proc/sys/kernel/ns_last_pid (needs root)");
    runner.stop(SIGKILL, 5s);
    return;
  }
  CHECK(stranger.pid() != pids[0]);
  runner.stop(SIGTERM, 5s);
  REQUIRE(log.exits().size() == 2);
  CHECK(stranger.answers());
  // Once its group was ended, rank 0 is collected.
  CHECK(wait_until([&] { return process_state(pids[0]) == 0; }, kBound));
}

TEST_CASE("a worker's stdout reaches its log file as whole lines, in order", "[runner]") {
  TempDir dir;
  ExitLog log;
  PosixProcessRunner runner;
  std::vector<WorkerLaunch> workers;
  for (int r = 0; r < 2; ++r) {
    auto w = Fake("lines:200").rank(r, 2).launch();
    w.output.prefix = "[w" + std::to_string(r) + "]:";
    w.output.stdout_file = dir.file("out_" + std::to_string(r) + ".log");
    workers.push_back(w);
  }
  runner.start(workers, log.callback());
  REQUIRE(log.wait_for(2));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(log.exits().at(static_cast<std::size_t>(r)).succeeded());
    // The prefix is for the console; the file holds the worker's own bytes.
    CHECK(read_lines(dir.file("out_" + std::to_string(r) + ".log")) == expected_lines(200, r));
  }
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("console lines carry their worker's prefix and never interleave", "[runner]") {
  TempDir dir;
  ExitLog log;
  PosixProcessRunner runner;
  std::vector<WorkerLaunch> workers;
  for (int r = 0; r < 2; ++r) {
    auto w = Fake("lines:300").rank(r, 2).launch();
    w.output.stdout_to_console = true;
    w.output.prefix = "[w" + std::to_string(r) + "]:";
    workers.push_back(w);
  }
  bool all_exited = false;
  {
    StdoutTo capture(new_file(dir.file("console")));
    runner.start(workers, log.callback());
    all_exited = log.wait_for(2);
    runner.stop(SIGTERM, 5s);
  }
  REQUIRE(all_exited);
  std::vector<std::string> per_rank[2];
  for (const auto& line : read_lines(dir.file("console"))) {
    if (line.rfind("[w0]:", 0) == 0) {
      per_rank[0].push_back(line);
    } else if (line.rfind("[w1]:", 0) == 0) {
      per_rank[1].push_back(line);
    } else {
      FAIL("console line without a worker prefix: '" << line << "'");
    }
  }
  CHECK(per_rank[0] == expected_lines(300, 0, "[w0]:"));
  CHECK(per_rank[1] == expected_lines(300, 1, "[w1]:"));
}

namespace {

// Sends this process's stdout (fd 1) into a pipe that nothing reads until read_all(), as a
// pager nobody scrolls does; restored when destroyed.
class StdoutToIdlePipe {
 public:
  StdoutToIdlePipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    read_end_ = fds[0];
    redirect_.emplace(fds[1]);
  }
  ~StdoutToIdlePipe() {
    restore();
    if (reader_.joinable()) reader_.join();
    ::close(read_end_);
  }
  StdoutToIdlePipe(const StdoutToIdlePipe&) = delete;
  StdoutToIdlePipe& operator=(const StdoutToIdlePipe&) = delete;

  // Starts reading everything, on a thread, until end of file (restore()).
  void read_all() {
    reader_ = std::thread([this] {
      char buffer[64 * 1024];
      ssize_t n;
      while ((n = ::read(read_end_, buffer, sizeof(buffer))) > 0) {
        text_.append(buffer, static_cast<std::size_t>(n));
      }
    });
  }
  // Gives fd 1 back; what was read is then complete.
  const std::string& restore() {
    redirect_.reset();
    if (reader_.joinable()) reader_.join();
    return text_;
  }

 private:
  std::optional<StdoutTo> redirect_;
  int read_end_ = -1;
  std::thread reader_;
  std::string text_;
};

// Whether `pid` waits in a write to a full pipe, having written at least `bytes`.
bool writing_to_pipe(pid_t pid, std::size_t bytes) {
  std::ifstream wchan("/proc/" + std::to_string(pid) + "/wchan");
  std::string where;
  if (!(wchan >> where) || where.find("pipe_write") == std::string::npos) return false;
  std::ifstream io("/proc/" + std::to_string(pid) + "/io");
  for (std::string key; io >> key;) {
    std::size_t value = 0;
    if (!(io >> value)) return false;
    if (key == "wchar:") return value >= bytes;
  }
  return false;
}

// Makes spdlog's default logger write to stderr until destroyed.
class LogToStderr {
 public:
  LogToStderr() {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "stderr", std::make_shared<spdlog::sinks::stderr_sink_mt>()));
  }
  ~LogToStderr() { spdlog::set_default_logger(previous_); }
  LogToStderr(const LogToStderr&) = delete;
  LogToStderr& operator=(const LogToStderr&) = delete;

 private:
  std::shared_ptr<spdlog::logger> previous_ = spdlog::default_logger();
};

}  // namespace

TEST_CASE("a console that takes nothing holds up neither exits nor stops and loses no line",
          "[runner]") {
  // The agent logs to stderr; so does this test while stdout is the idle pipe.
  std::optional<LogToStderr> log_to_stderr(std::in_place);
  ExitLog log;
  std::string console;
  bool blocked = false;
  bool reported = false;
  std::size_t unreaped = 0;
  ddprun::Clock::duration stop_took{};
  {
    StdoutToIdlePipe idle;
    {
      PosixProcessRunner runner;
      auto chatty = Fake("lines:60000").rank(0, 2).launch();
      chatty.output.stdout_to_console = true;
      const auto pids =
          runner.start({chatty, Fake("hang").rank(1, 2).launch()}, log.callback());
      // Rank 0 writes far more than the console pipe and the runner's backlog hold, and
      // nothing reads the console: rank 0 comes to wait in its write, past the backlog. Rank
      // 1's exit then is still reported, and rank 0 still stopped.
      blocked = wait_until(
          [&] { return writing_to_pipe(pids[0], ddprun::ConsoleWriter::kBacklogLimit); },
          kBound);
      ::kill(pids[1], SIGKILL);
      reported = log.wait_for(1);
      if (reported) {
        const auto stop_began = ddprun::Clock::now();
        unreaped = runner.stop(SIGTERM, 5s).size();
        stop_took = ddprun::Clock::now() - stop_began;
      }
      // Once somebody reads the console, every line rank 0 wrote reaches it (the runner's
      // end waits for them). Read at once when the runner is stuck, so that the failure shows.
      idle.read_all();
    }
    console = idle.restore();
  }
  log_to_stderr.reset();
  // Checked only now: Catch2 reports a failure on stdout, which went to the idle pipe.
  CHECK(blocked);
  REQUIRE(reported);
  CHECK(unreaped == 0);
  CHECK(stop_took < kBound);
  const auto exits = log.exits();
  REQUIRE(exits.size() == 2);
  CHECK(exits[0].signal == SIGTERM);
  CHECK(exits[1].signal == SIGKILL);
  // Whole lines, in order, none missing: those rank 0 wrote before the stop, more than the
  // pipes and the backlog held.
  std::vector<std::string> lines;
  std::istringstream in(console);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(console.size() > ddprun::ConsoleWriter::kBacklogLimit);
  CHECK(console.back() == '\n');
  const auto all = expected_lines(60000, 0);
  REQUIRE(lines.size() <= all.size());
  CHECK(lines == std::vector<std::string>(all.begin(), all.begin() + lines.size()));
}

TEST_CASE("a crashing worker's last lines are not lost", "[runner]") {
  TempDir dir;
  ExitLog log;
  PosixProcessRunner runner;
  auto w = Fake("lines_crash:50").launch();
  w.output.stdout_file = dir.file("out.log");
  w.output.stderr_file = dir.file("err.log");
  runner.start({w}, log.callback());
  REQUIRE(log.wait_for(1));
  const auto e = log.exits().at(0);
  CHECK(e.signal == SIGABRT);
  CHECK(read_lines(dir.file("out.log")) == expected_lines(50, 0));
  CHECK(tail_contains(e, "aborting after 50 lines"));
  const auto err = read_lines(dir.file("err.log"));
  REQUIRE(err.size() == 1);
  CHECK_THAT(err[0], Contains("aborting after 50 lines"));
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("starting a program that does not exist throws Error naming it", "[runner]") {
  PosixProcessRunner runner;
  SECTION("not on PATH") {
    auto w = Fake().launch();
    w.argv = {"ddprun-no-such-program-xyz", "--flag"};
    CHECK_THROWS_AS(runner.start({w}, {}), ddprun::Error);
    CHECK_THROWS_WITH(runner.start({w}, {}), Contains("ddprun-no-such-program-xyz"));
  }
  SECTION("an absolute path") {
    auto w = Fake().launch();
    w.argv = {"/nonexistent/ddprun-missing-binary"};
    CHECK_THROWS_AS(runner.start({w}, {}), ddprun::Error);
    CHECK_THROWS_WITH(runner.start({w}, {}), Contains("/nonexistent/ddprun-missing-binary"));
  }
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("when a later worker cannot start, the ones already started are killed", "[runner]") {
  ExitLog log;
  PosixProcessRunner runner;
  auto missing = Fake().rank(1, 2).launch();
  missing.argv = {"ddprun-no-such-program-xyz"};
  CHECK_THROWS_WITH(
      runner.start({Fake("hang").rank(0, 2).launch(), missing},
                   log.callback()),
      Contains("local rank 1") && Contains("ddprun-no-such-program-xyz"));
  REQUIRE(log.wait_for(1));
  const auto e = log.exits().at(0);
  CHECK(e.local_rank == 0);
  CHECK(e.signal == SIGKILL);
  CHECK_FALSE(process_alive(e.pid));
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("the worker gets exactly the environment it was launched with", "[runner]") {
  TempDir dir;
  ExitLog log;
  PosixProcessRunner runner;
  std::vector<WorkerLaunch> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(Fake("env")
                          .rank(r, 2)
                          .env("FAKE_ENV_DIR", dir.path())
                          .env("DDPRUN_TEST_VALUE", "a b=c")
                          .launch());
  }
  runner.start(workers, log.callback());
  REQUIRE(log.wait_for(2));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(log.exits().at(static_cast<std::size_t>(r)).succeeded());
    auto got = read_lines(dir.file("env_" + std::to_string(r) + ".txt"));
    auto want = workers[static_cast<std::size_t>(r)].env;
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    CHECK(got == want);
    CHECK(std::count(got.begin(), got.end(), "RANK=" + std::to_string(r)) == 1);
  }
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("fake worker failure modes follow rank and restart count", "[runner][fake_worker]") {
  TempDir dir;
  for (int attempt = 0; attempt < 2; ++attempt) {
    INFO("restart count " << attempt);
    ExitLog log;
    PosixProcessRunner runner;
    std::vector<WorkerLaunch> workers;
    for (int r = 0; r < 3; ++r) {
      workers.push_back(Fake("fail_rank:1:5")
                            .rank(r, 4)
                            .restart(attempt)
                            .env("FAKE_TOUCH_DIR", dir.path())
                            .launch());
    }
    workers.push_back(Fake("fail_first:7").rank(3, 4).restart(attempt).launch());
    runner.start(workers, log.callback());
    REQUIRE(log.wait_for(4));
    const auto exits = log.exits();
    CHECK(exits[0].exit_code == 0);
    CHECK(exits[1].exit_code == (attempt == 0 ? 5 : 0));
    CHECK(exits[2].exit_code == 0);
    CHECK(exits[3].exit_code == (attempt == 0 ? 7 : 0));
    for (int r = 0; r < 3; ++r) {
      CHECK(ddprun::test::file_exists(
          dir.file("started_" + std::to_string(r) + "_" + std::to_string(attempt))));
    }
    runner.stop(SIGTERM, 5s);
  }
}

TEST_CASE("fake worker writes torchrun's error file", "[runner][fake_worker]") {
  TempDir dir;
  ExitLog log;
  PosixProcessRunner runner;
  const auto before = std::time(nullptr);
  runner.start({Fake("error_file:4").error_file(dir.file("error.json")).launch()},
               log.callback());
  REQUIRE(log.wait_for(1));
  CHECK(log.exits()[0].exit_code == 4);
  std::ifstream in(dir.file("error.json"));
  const auto json = nlohmann::json::parse(in);
  CHECK(json["message"]["message"] == "RuntimeError: fake failure on rank 0");
  const std::string callstack = json["message"]["extraInfo"]["py_callstack"];
  CHECK_THAT(callstack, Contains("Traceback (most recent call last):\n  File \"fake.py\""));
  CHECK_THAT(callstack, Contains("\nRuntimeError: fake failure"));
  const std::string timestamp = json["message"]["extraInfo"]["timestamp"];
  CHECK(std::stol(timestamp) >= before);
  CHECK(std::stol(timestamp) <= std::time(nullptr));
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("fake worker rejects an unknown mode with exit code 99", "[runner][fake_worker]") {
  ExitLog log;
  PosixProcessRunner runner;
  runner.start({Fake("bogus:1").launch()}, log.callback());
  REQUIRE(log.wait_for(1));
  CHECK(log.exits()[0].exit_code == 99);
  CHECK(tail_contains(log.exits()[0], "unknown mode 'bogus:1'"));
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("a runner starts a new group after stopping the previous one", "[runner]") {
  PosixProcessRunner runner;
  ExitLog first;
  runner.start({Fake("hang").launch()}, first.callback());
  runner.stop(SIGTERM, 5s);
  REQUIRE(first.exits().size() == 1);
  CHECK(first.exits()[0].signal == SIGTERM);

  ExitLog second;
  runner.start({Fake("exit:2").restart(1).launch()}, second.callback());
  REQUIRE(second.wait_for(1));
  CHECK(second.exits()[0].exit_code == 2);
  CHECK(first.exits().size() == 1);  // the old callback hears nothing more
  runner.stop(SIGTERM, 5s);
}

TEST_CASE("destroying the runner kills its workers", "[runner]") {
  std::vector<int> pids;
  {
    PosixProcessRunner runner;
    pids = runner.start({Fake("hang").launch()}, {});
    REQUIRE(process_alive(pids[0]));
  }
  CHECK_FALSE(process_alive(pids[0]));
}
