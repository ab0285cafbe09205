#pragma once
// How many CPUs this process may run on, for --nproc-per-node=cpu.

namespace ddprun {

// The size of this process's CPU affinity mask (what taskset, cgroups cpusets and container
// runtimes restrict), falling back to std::thread::hardware_concurrency(); at least 1.
int usable_cpu_count();

}  // namespace ddprun
