#include "process/thread_state.hpp"

#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace ddprun {

namespace {

// "state D in folio_wait_bit_common" from a /proc task directory ("/proc/PID/", ...).
std::string state_in(const std::string& dir) {
  // "tid (name) state ...": the name may hold spaces and parentheses.
  std::string stat;
  std::getline(std::ifstream(dir + "stat"), stat);
  const auto close = stat.rfind(')');
  const char state = close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
  std::string wchan;
  std::getline(std::ifstream(dir + "wchan"), wchan);
  return fmt::format("state {}{}", state,
                     wchan.empty() || wchan == "0" ? std::string() : " in " + wchan);
}

}  // namespace

std::string thread_whereabouts(pid_t tid) {
  if (tid == 0) return "not started";
  return fmt::format("tid {}, {}", tid, state_in(fmt::format("/proc/self/task/{}/", tid)));
}

std::string process_whereabouts(pid_t pid) {
  const auto dir = fmt::format("/proc/{}/", pid);
  auto text = state_in(dir);
  // A traced process's exit is its tracer's to collect first (a debugger, a profiler).
  std::ifstream status(dir + "status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("TracerPid:", 0) != 0) continue;
    const auto tracer = std::atol(line.c_str() + 10);
    if (tracer != 0) {
      std::string name;
      std::getline(std::ifstream(fmt::format("/proc/{}/comm", tracer)), name);
      text += fmt::format(", traced by pid {}{}", tracer, name.empty() ? "" : " (" + name + ")");
    }
    break;
  }
  return text;
}

}  // namespace ddprun
