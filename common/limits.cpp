#include "common/limits.hpp"

namespace ddprun {
namespace {

rlimit g_inherited{};
bool g_raised = false;

}  // namespace

long raise_open_files_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      g_inherited = limit;
      g_raised = true;
      return static_cast<long>(raised.rlim_cur);
    }
  }
  return static_cast<long>(limit.rlim_cur);
}

const rlimit* inherited_open_files_limit() { return g_raised ? &g_inherited : nullptr; }

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

}  // namespace ddprun
