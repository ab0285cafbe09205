#include "common/limits.hpp"

#include <sys/resource.h>

namespace ddprun {

long raise_open_files_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return static_cast<long>(raised.rlim_cur);
  }
  return static_cast<long>(limit.rlim_cur);
}

}  // namespace ddprun
