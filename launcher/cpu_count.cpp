#include "launcher/cpu_count.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace ddprun {

int usable_cpu_count() {
  // torchrun uses os.cpu_count(), which ignores the affinity mask and so oversubscribes a
  // container limited to a few cores; the mask is what the workers can actually use.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace ddprun
