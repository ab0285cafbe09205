// fake_worker: a tiny worker for ddprun's integration tests, in the spirit of TorchElastic's
// test workers. It reads only torchrun's environment (RANK, TORCHELASTIC_RESTART_COUNT,
// TORCHELASTIC_ERROR_FILE) and behaves as FAKE_MODE, or a first argument --mode=X, says.
// Standard library and POSIX only: it links no ddprun code.
//
// Modes (default `succeed`):
//   succeed              exit 0
//   exit:N               exit N
//   segfault             one line on stderr, then SIGSEGV
//   hang                 wait for a signal forever
//   stubborn             like hang, but ignores SIGTERM, SIGINT and SIGHUP (set up before the
//                        FAKE_TOUCH_DIR file appears), so only SIGKILL ends it
//   fail_first:N         exit N on the first attempt (restart count 0 or unset), else 0
//   fail_rank:R:N        exit N when RANK == R on the first attempt, else 0
//   lines:K              K numbered lines on stdout, exit 0
//   lines_crash:K        K numbered lines on stdout, one line on stderr, then abort()
//   grandchild           fork a child that ignores SIGTERM/SIGINT/SIGHUP and sleeps forever;
//                        that child appends "<worker pid>\n<grandchild pid>\n" to
//                        $FAKE_PID_FILE once it is set up; the worker itself hangs
//   grandchild_bare      like grandchild, but the child then execs `sleep 3600` with an empty
//                        environment (polite signals still ignored): nothing in it carries the
//                        orphan guard's marker, so only a kill of the worker's group reaches it
//   daemon               fork a daemon (setsid: its own session and group, polite signals
//                        ignored) that appends "<daemon pid>\n" to $FAKE_PID_FILE and sleeps
//                        forever; once it has, exit 0
//   daemon_hang          the same, but the worker itself hangs
//   group_child          like daemon, but the child only leaves the worker's process group
//                        (setpgid), staying in its session
//   long_line:N          write a line of N bytes, then "last" without a newline, exit 0
//   env                  write the environment as KEY=VALUE lines to $FAKE_ENV_DIR/env_<RANK>.txt
//   fds                  write the open descriptors as "FD TARGET" lines to
//                        $FAKE_ENV_DIR/fds_<RANK>.txt, exit 0
//   sleep:MS             sleep MS milliseconds, exit 0
//   error_file:N         write torchrun's error-file JSON to $TORCHELASTIC_ERROR_FILE, exit N
//   error_file_slow:N:MS like error_file (a timestamp with milliseconds), but take MS milliseconds
//                        to exit, as a worker with a slow teardown does; with FAKE_TOUCH_DIR set,
//                        $FAKE_TOUCH_DIR/error_file_<RANK> is created once the error file is written
//   sleep_exit:MS:N      sleep MS milliseconds, then exit N (a knock-on failure, a little later)
//   after_file:NAME:MS:N wait until $FAKE_TOUCH_DIR/NAME exists, sleep MS milliseconds, then exit
//                        N (a knock-on failure, a little after another worker's, whatever the load)
// In every mode, when FAKE_TOUCH_DIR is set, $FAKE_TOUCH_DIR/started_<RANK>_<RESTART_COUNT> is
// created first. Files that tests read are written under a temporary name and renamed, so a
// reader never sees a partial file.
//
// Exit codes of its own: 99 for an unknown mode or a malformed number, 98 when a side file
// cannot be written.

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace {

constexpr int kUnknownMode = 99;
constexpr int kSideFileFailed = 98;

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : fallback;
}

std::string rank() { return env_or("RANK", "0"); }
std::string restart_count() { return env_or("TORCHELASTIC_RESTART_COUNT", "0"); }
bool first_attempt() {
  const char* value = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return value == nullptr || std::string_view(value) == "0";
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    auto n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

[[noreturn]] void fail(int code, const std::string& message) {
  write_all(STDERR_FILENO, "fake_worker: " + message + "\n");
  std::_Exit(code);
}

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// "a:b:c" -> {"a", "b", "c"}.
std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    auto pos = text.find(sep);
    parts.push_back(text.substr(0, pos));
    if (pos == std::string_view::npos) return parts;
    text.remove_prefix(pos + 1);
  }
}

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(kSideFileFailed, "cannot create " + tmp + ": " + std::strerror(errno));
  const bool ok = write_all(fd, content);
  ::close(fd);
  if (!ok) fail(kSideFileFailed, "cannot write " + tmp + ": " + std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    fail(kSideFileFailed, "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

// Creates $FAKE_TOUCH_DIR/<name> (empty) when FAKE_TOUCH_DIR is set.
void touch(const std::string& name) {
  const char* dir = std::getenv("FAKE_TOUCH_DIR");
  if (dir == nullptr) return;
  const std::string path = std::string(dir) + "/" + name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail(kSideFileFailed, "cannot create " + path + ": " + std::strerror(errno));
  ::close(fd);
}

void touch_started() { touch("started_" + rank() + "_" + restart_count()); }

[[noreturn]] void sleep_forever() {
  while (true) pause();
}

void ignore_polite_signals() {
  for (int s : {SIGTERM, SIGINT, SIGHUP}) signal(s, SIG_IGN);
}

void sleep_ms(int ms) {
  timespec left{ms / 1000, static_cast<long>(ms % 1000) * 1'000'000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

// A crash test must not litter the working directory with core files.
void no_core_dump() {
  rlimit none{0, 0};
  setrlimit(RLIMIT_CORE, &none);
}

void print_lines(int count) {
  for (int i = 1; i <= count; ++i) {
    // One write per line: the agent sees many small reads, as with an unbuffered Python worker.
    write_all(STDOUT_FILENO, "line " + std::to_string(i) + " of " + std::to_string(count) +
                                 " from rank " + rank() + "\n");
  }
}

[[noreturn]] void grandchild_mode(bool bare = false) {
  const pid_t worker = getpid();
  const pid_t child = fork();
  if (child < 0) fail(kSideFileFailed, std::string("fork failed: ") + std::strerror(errno));
  if (child == 0) {
    // Only a SIGKILL to the whole process group (or from the orphan guard) ends this process,
    // like a data-loader child that outlives a polite stop.
    ignore_polite_signals();
    if (const char* pid_file = std::getenv("FAKE_PID_FILE")) {
      int fd = ::open(pid_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) fail(kSideFileFailed, std::string("cannot open ") + pid_file);
      // One short O_APPEND write: a reader sees both pids or neither.
      write_all(fd, std::to_string(worker) + "\n" + std::to_string(getpid()) + "\n");
      ::close(fd);
    }
    if (bare) {
      char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("3600"), nullptr};
      char* const no_env[] = {nullptr};
      ::execve("/bin/sleep", argv, no_env);
      fail(kSideFileFailed, std::string("cannot exec /bin/sleep: ") + std::strerror(errno));
    }
    sleep_forever();
  }
  sleep_forever();
}

// A daemon, as a worker's helper that detaches itself: out of the worker's process group and
// session, so that only a kill aimed at it (or a sweep of the agent's adopted children) ends it.
// With `own_session` false it leaves only the group, as a shell's background job does.
void start_daemon(bool own_session = true) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) fail(kSideFileFailed, "pipe failed");
  const pid_t child = fork();
  if (child < 0) fail(kSideFileFailed, std::string("fork failed: ") + std::strerror(errno));
  if (child == 0) {
    if (own_session) {
      ::setsid();
    } else {
      ::setpgid(0, 0);
    }
    ignore_polite_signals();
    if (const char* pid_file = std::getenv("FAKE_PID_FILE")) {
      int fd = ::open(pid_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) fail(kSideFileFailed, std::string("cannot open ") + pid_file);
      write_all(fd, std::to_string(getpid()) + "\n");
      ::close(fd);
    }
    write_all(ready[1], "r");
    sleep_forever();
  }
  ::close(ready[1]);
  char byte = 0;
  while (::read(ready[0], &byte, 1) < 0 && errno == EINTR) {
  }
  ::close(ready[0]);
}

[[noreturn]] void env_mode() {
  const char* dir = std::getenv("FAKE_ENV_DIR");
  if (dir == nullptr) fail(kSideFileFailed, "env mode needs FAKE_ENV_DIR");
  std::string content;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    content += *e;
    content += '\n';
  }
  write_file_atomically(std::string(dir) + "/env_" + rank() + ".txt", content);
  std::_Exit(0);
}

[[noreturn]] void fds_mode() {
  const char* dir = std::getenv("FAKE_ENV_DIR");
  if (dir == nullptr) fail(kSideFileFailed, "fds mode needs FAKE_ENV_DIR");
  DIR* listing = ::opendir("/proc/self/fd");
  if (listing == nullptr) fail(kSideFileFailed, "cannot list /proc/self/fd");
  std::string content;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || std::stoi(name) == ::dirfd(listing)) continue;
    char target[4096];
    const auto n = ::readlink(("/proc/self/fd/" + name).c_str(), target, sizeof(target));
    content += name + " " + std::string(target, n > 0 ? static_cast<std::size_t>(n) : 0) + "\n";
  }
  ::closedir(listing);
  write_file_atomically(std::string(dir) + "/fds_" + rank() + ".txt", content);
  std::_Exit(0);
}

void write_error_file(const std::string& timestamp) {
  const std::string path = env_or("TORCHELASTIC_ERROR_FILE", "");
  if (!path.empty()) {
    // The JSON escapes (\n, \") are part of the file's text, as Python's json.dump writes them.
    const std::string json =
        R"({"message": {"message": "RuntimeError: fake failure on rank )" + rank() +
        R"(", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"fake.py\", line 1\nRuntimeError: fake failure", "timestamp": ")" +
        timestamp + R"("}}})";
    write_file_atomically(path, json);
  }
}

[[noreturn]] void error_file_mode(int code) {
  write_error_file(std::to_string(std::time(nullptr)));
  std::_Exit(code);
}

[[noreturn]] void error_file_slow_mode(int code, int ms) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%lld.%03ld", static_cast<long long>(now.tv_sec),
                now.tv_nsec / 1'000'000);
  write_error_file(stamp);
  touch("error_file_" + rank());
  sleep_ms(ms);
  std::_Exit(code);
}

// Waits for $FAKE_TOUCH_DIR/<name> with a short poll (the agent ends a worker that waits too
// long), then sleeps `ms` and exits with `code`.
[[noreturn]] void after_file_mode(std::string_view mode, const std::string& name, int ms, int code) {
  const char* dir = std::getenv("FAKE_TOUCH_DIR");
  if (dir == nullptr) fail(kUnknownMode, std::string(mode) + " needs FAKE_TOUCH_DIR");
  const std::string path = std::string(dir) + "/" + name;
  while (::access(path.c_str(), F_OK) != 0) sleep_ms(5);
  sleep_ms(ms);
  std::_Exit(code);
}

[[noreturn]] void unknown(std::string_view mode) {
  fail(kUnknownMode, "unknown mode '" + std::string(mode) + "'");
}

int number(std::string_view mode, std::string_view text) {
  auto value = parse_int(text);
  if (!value) unknown(mode);
  return *value;
}

[[noreturn]] void run(std::string_view mode) {
  const auto parts = split(mode, ':');
  const std::string_view name = parts[0];
  const std::size_t args = parts.size() - 1;

  if (name == "succeed" && args == 0) std::_Exit(0);
  if (name == "exit" && args == 1) std::_Exit(number(mode, parts[1]));
  if (name == "segfault" && args == 0) {
    no_core_dump();
    write_all(STDERR_FILENO, "fake worker rank " + rank() + ": raising SIGSEGV\n");
    kill(getpid(), SIGSEGV);
    fail(kUnknownMode, "SIGSEGV did not end the process");
  }
  if ((name == "hang" || name == "stubborn") && args == 0) sleep_forever();
  if (name == "fail_first" && args == 1) {
    const int code = number(mode, parts[1]);
    std::_Exit(first_attempt() ? code : 0);
  }
  if (name == "fail_rank" && args == 2) {
    const int target = number(mode, parts[1]);
    const int code = number(mode, parts[2]);
    const auto my_rank = parse_int(rank());
    std::_Exit(my_rank && *my_rank == target && first_attempt() ? code : 0);
  }
  if (name == "lines" && args == 1) {
    print_lines(number(mode, parts[1]));
    std::_Exit(0);
  }
  if (name == "lines_crash" && args == 1) {
    const int count = number(mode, parts[1]);
    no_core_dump();
    print_lines(count);
    write_all(STDERR_FILENO, "fake worker rank " + rank() + ": aborting after " +
                                 std::to_string(count) + " lines\n");
    std::abort();
  }
  if (name == "grandchild" && args == 0) grandchild_mode();
  if (name == "grandchild_bare" && args == 0) grandchild_mode(true);
  if (name == "env" && args == 0) env_mode();
  if (name == "long_line" && args == 1) {
    std::string text;
    const int n = number(mode, parts[1]);
    for (int i = 0; i < n; ++i) text += static_cast<char>('a' + i % 26);
    write_all(STDOUT_FILENO, text + "\nlast");
    std::_Exit(0);
  }
  if ((name == "daemon" || name == "daemon_hang") && args == 0) {
    start_daemon();
    if (name == "daemon_hang") sleep_forever();
    std::_Exit(0);
  }
  if (name == "group_child" && args == 0) {
    start_daemon(false);
    std::_Exit(0);
  }
  if (name == "fds" && args == 0) fds_mode();
  if (name == "sleep" && args == 1) {
    sleep_ms(number(mode, parts[1]));
    std::_Exit(0);
  }
  if (name == "error_file" && args == 1) error_file_mode(number(mode, parts[1]));
  if (name == "error_file_slow" && args == 2) {
    error_file_slow_mode(number(mode, parts[1]), number(mode, parts[2]));
  }
  if (name == "after_file" && args == 3) {
    after_file_mode(mode, std::string(parts[1]), number(mode, parts[2]), number(mode, parts[3]));
  }
  if (name == "sleep_exit" && args == 2) {
    sleep_ms(number(mode, parts[1]));
    std::_Exit(number(mode, parts[2]));
  }
  unknown(mode);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = env_or("FAKE_MODE", "succeed");
  constexpr std::string_view kModeFlag = "--mode=";
  if (argc > 1 && std::string_view(argv[1]).substr(0, kModeFlag.size()) == kModeFlag) {
    mode = std::string(argv[1] + kModeFlag.size());
  }
  // Before the start file appears: a test that waits for it may send SIGTERM at once.
  if (mode == "stubborn") ignore_polite_signals();
  touch_started();
  run(mode);
}
