#include "process/stack_capture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "process/program_check.hpp"
#include "process/spawn.hpp"

namespace ddprun {

namespace fs = std::filesystem;

namespace {

// Walks every Python thread's frames from the interpreter's own thread states, with the frame
// classes of the gdb extension Debian ships with python3.11-dbg (auto-loaded with the
// interpreter's debug information). Unlike py-bt it needs no native unwinding, so the shared
// libraries' symbols (libtorch's alone take about a second and a half to read) are not loaded
// for Python workers. Prints py-bt's layout: `File "F", line N, in NAME` and the source line.
constexpr const char* kPythonWalker = R"py(
import linecache
def _ddprun_python_stacks():
    if "PyFramePtr" not in globals():
        print("(no Python frames: the interpreter's gdb extension is not loaded; Debian: python3.11-dbg)")
        return
    main = int(gdb.parse_and_eval("_PyRuntime.main_thread"))
    interp = gdb.parse_and_eval("_PyRuntime.interpreters.head")
    while int(interp) != 0:
        tstate = interp["threads"]["head"]
        while int(tstate) != 0:
            ident = int(tstate["thread_id"])
            print("Python thread %d%s (most recent call first):" % (ident, " (main)" if ident == main else ""))
            frame = tstate["cframe"]["current_frame"]
            while int(frame) != 0:
                f = PyFramePtr(frame)
                if f.is_optimized_out():
                    print("  (frame optimized out)")
                else:
                    filename = f.co_filename.proxyval(set())
                    line = f.current_line_num()
                    print('  File "%s", line %s, in %s' % (filename, line if line is not None else "?", f.co_name.proxyval(set())))
                    source = linecache.getline(filename, line).strip() if line else ""
                    if source:
                        print("    " + source)
                frame = frame["previous"]
            tstate = tstate["next"]
        interp = interp["next"]
)py";

// A Python worker is an interpreter whose executable is named python*, however it was started.
bool is_python(int pid) {
  std::error_code ec;
  const auto exe = fs::read_symlink(fmt::format("/proc/{}/exe", pid), ec);
  return !ec && exe.filename().string().rfind("python", 0) == 0;
}

// One debugger process and the targets it captures.
struct Job {
  std::vector<std::size_t> targets;
  std::vector<std::string> argv;
  std::string output;  // its own stdout and stderr
  pid_t pid = -1;
  int pidfd = -1;
};

void start(Job& job, const std::string& gdb) {
  const int out = ::open(job.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) throw Error(fmt::format("cannot write {}: {}", job.output, errno_message(errno)));
  SpawnRequest request;
  request.path = gdb;
  request.argv = job.argv;
  request.stdout_fd = out;
  request.stderr_fd = out;
  try {
    job.pid = spawn_process(request);
  } catch (...) {
    ::close(out);
    throw;
  }
  ::close(out);
  job.pidfd = static_cast<int>(syscall(SYS_pidfd_open, job.pid, 0));
}

// gdb, in batch mode, without the user's gdbinit, quiet.
std::vector<std::string> gdb_batch(const std::string& gdb) {
  return {gdb, "-batch", "-nx", "-q", "-iex", "set pagination off", "-iex",
          "set print thread-events off"};
}

// One debugger for several Python interpreters, attaching to them one after another and writing
// each one's stacks to its target's file (gdb's logging).
std::vector<std::string> python_command(const std::string& gdb,
                                        const std::vector<StackTarget>& targets) {
  auto argv = gdb_batch(gdb);
  const auto add = [&argv](std::initializer_list<std::string> more) {
    argv.insert(argv.end(), more);
  };
  add({"-iex", "set auto-solib-add off", "-ex",
       "python exec(" + nlohmann::json(std::string(kPythonWalker)).dump() + ")"});
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (i > 0) add({"-ex", "add-inferior", "-ex", fmt::format("inferior {}", i + 1)});
    // Detached before the next one: `thread apply all` covers every inferior that holds a
    // process, and the worker goes on at once.
    add({"-ex", "set logging file " + targets[i].file, "-ex", "set logging overwrite on", "-ex",
         "set logging redirect on", "-ex", "set logging enabled on", "-ex",
         fmt::format("attach {}", targets[i].pid), "-ex", "echo \\n--- python ---\\n", "-ex",
         "python _ddprun_python_stacks()", "-ex", "echo \\n--- native ---\\n", "-ex",
         "thread apply all bt", "-ex", "detach", "-ex", "set logging enabled off"});
  }
  return argv;
}

// Native programs: every shared library's symbols, so that their frames have names.
std::vector<std::string> native_command(const std::string& gdb, int pid) {
  auto argv = gdb_batch(gdb);
  argv.insert(argv.end(), {"-p", std::to_string(pid), "-ex", "echo \\n--- native ---\\n", "-ex",
                           "thread apply all bt"});
  return argv;
}

constexpr const char* kNoDebugger =
    "no debugger: gdb is not on PATH (Debian: apt-get install gdb python3.11-dbg)";

ProgramCheck find_gdb() {
  const char* path = std::getenv("PATH");
  return check_program("gdb", path != nullptr ? path : "");
}

}  // namespace

std::optional<std::string> stacks_unavailable() {
  if (find_gdb().exit_code == 0) return std::nullopt;
  return std::string(kNoDebugger);
}

std::vector<StackCapture> capture_stacks(const std::vector<StackTarget>& targets,
                                         Deadline deadline) {
  std::vector<StackCapture> results(targets.size());
  // One capture at a time in this process: a debugger cannot attach to a process another one
  // holds, so a `ddprun status --stacks` and the agent's own capture of a hang take turns.
  static std::timed_mutex one_at_a_time;
  std::unique_lock turn(one_at_a_time, std::defer_lock);
  if (!turn.try_lock_until(deadline.when())) {
    for (std::size_t i = 0; i < targets.size(); ++i) {
      results[i].pid = targets[i].pid;
      results[i].file = targets[i].file;
      results[i].error = "another capture of stacks in this agent ran past the deadline";
    }
    return results;
  }
  const auto started = Clock::now();
  const auto gdb_check = find_gdb();
  const auto& gdb = gdb_check.path;
  std::vector<std::size_t> python;
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    results[i].pid = targets[i].pid;
    results[i].file = targets[i].file;
    if (gdb_check.exit_code != 0) {
      results[i].error = kNoDebugger;
      continue;
    }
    results[i].python = is_python(targets[i].pid);
    if (results[i].python) {
      python.push_back(i);
    } else {
      Job job;
      job.targets = {i};
      job.argv = native_command(gdb, targets[i].pid);
      job.output = targets[i].file;
      jobs.push_back(std::move(job));
    }
  }
  // Python workers: one debugger per core, each attaching to its share of the workers one after
  // another; the interpreter's debug information is read once per debugger, not per worker.
  if (!python.empty()) {
    const std::size_t groups =
        std::min<std::size_t>(python.size(), std::max(1U, std::thread::hardware_concurrency()));
    for (std::size_t g = 0; g < groups; ++g) {
      Job job;
      std::vector<StackTarget> group;
      for (std::size_t k = g; k < python.size(); k += groups) {
        job.targets.push_back(python[k]);
        group.push_back(targets[python[k]]);
      }
      job.argv = python_command(gdb, group);
      job.output = "/dev/null";  // each worker's part goes to its own file (gdb's logging)
      jobs.push_back(std::move(job));
    }
  }
  for (auto& job : jobs) {
    try {
      start(job, gdb);
    } catch (const Error& e) {
      for (auto i : job.targets) results[i].error = e.what();
    }
  }

  // Wait for every debugger on its pidfd, all within the one deadline.
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Job*> waiting;
    for (auto& job : jobs) {
      if (job.pid > 0) {
        fds.push_back(pollfd{job.pidfd, POLLIN, 0});
        waiting.push_back(&job);
      }
    }
    if (waiting.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining());
    const int n = left.count() > 0 ? ::poll(fds.data(), fds.size(), static_cast<int>(left.count()))
                                   : 0;
    if (n < 0 && errno == EINTR) continue;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      auto& job = *waiting[k];
      const bool done = n > 0 && (fds[k].revents & (POLLIN | POLLHUP)) != 0;
      if (!done && n > 0) continue;
      if (!done) {
        // The deadline passed: its whole group. A worker it had just attached to may keep the
        // SIGSTOP of the attach once the kernel detaches it: let it run on.
        ::kill(-job.pid, SIGKILL);
        for (auto i : job.targets) ::kill(targets[i].pid, SIGCONT);
      }
      int status = 0;
      while (::waitpid(job.pid, &status, 0) < 0 && errno == EINTR) {
      }
      ::close(job.pidfd);
      job.pid = -1;
      const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
      for (auto i : job.targets) {
        auto& r = results[i];
        r.seconds = seconds;
        if (!done) {
          r.error = fmt::format("the debugger did not finish within the capture's deadline "
                                "({:.1f}s)", seconds);
        } else if (job.targets.size() > 1 || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          // Several workers in one debugger: whether each worked shows in its own file.
          r.ok = true;
        } else {
          r.error = fmt::format("the debugger failed ({}); see {}",
                                WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                                  : fmt::format("signal {}", WTERMSIG(status)),
                                r.file);
        }
      }
    }
  }
  return results;
}

}  // namespace ddprun
