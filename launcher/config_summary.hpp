#pragma once
// The resolved configuration as the aligned block ddprun logs once at startup.

#include <string>

#include "common/launch_config.hpp"

namespace ddprun {

// Lines "key   value" with the values in one column, separated by '\n', no trailing newline:
// nodes, nproc per node, rendezvous (backend, endpoint, run id), node rank (static only),
// max restarts, shutdown timeout, log dir, program (argv joined, shell-quoted where needed).
std::string describe(const LaunchConfig& config);

// Whether the job writes files worth keeping: --redirects or --tee send some worker's output to
// files (stdout.log, stderr.log), or --hang-timeout may write the workers' stacks.
bool writes_log_files(const LaunchConfig& config);
// Whether --redirects or --tee send some worker's output to files.
bool writes_output_files(const LaunchConfig& config);

}  // namespace ddprun
