#pragma once
// Whether the kernel's OOM killer ended a process: a SIGKILL looks the same whoever sent it,
// but the memory cgroup counts the kills its OOM killer makes (cgroup v2: memory.events,
// oom_kill; v1: memory.oom_control, oom_kill), as Slurm reads them.

#include <optional>
#include <string>

namespace ddprun {

// The OOM kills counted in this process's memory cgroup (where the workers it starts are too);
// nullopt when no counter is readable (no memory controller, the root cgroup, an old kernel).
std::optional<long> oom_kill_count();

// The same for the cgroup at `proc_cgroup` (the text of /proc/<pid>/cgroup) under the cgroup
// mount `root` (tests give another root).
std::optional<long> oom_kill_count(const std::string& proc_cgroup, const std::string& root);

}  // namespace ddprun
