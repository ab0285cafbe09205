#include "process/thread_state.hpp"

#include <fstream>

#include <fmt/format.h>

namespace ddprun {

std::string thread_whereabouts(pid_t tid) {
  if (tid == 0) return "not started";
  const auto dir = fmt::format("/proc/self/task/{}/", tid);
  // "tid (name) state ...": the name may hold spaces and parentheses.
  std::string stat;
  std::getline(std::ifstream(dir + "stat"), stat);
  const auto close = stat.rfind(')');
  const char state = close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
  std::string wchan;
  std::getline(std::ifstream(dir + "wchan"), wchan);
  return fmt::format("tid {}, state {}{}", tid, state,
                     wchan.empty() || wchan == "0" ? std::string() : " in " + wchan);
}

}  // namespace ddprun
