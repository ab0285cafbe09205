#pragma once
// The ways ddprun runs, one file each; main.cpp picks one from the command line.
//   run_agent.cpp    a node's agent: started by hand, by srun, or by a --hosts command
//   run_hosts.cpp    the --hosts command: an agent on every host, one report, one exit code
//   run_remote.cpp   the agent's end of a session with a --hosts command on another host
//   run_dry_run.cpp  --dry-run: the plan, and nothing started
// Each returns the process's exit code; what it throws, main turns into one
// (common/exit_codes.hpp).

#include <string>
#include <vector>

#include "cluster/session_protocol.hpp"
#include "common/launch_config.hpp"
#include "process/program_check.hpp"

namespace ddprun {

class HeadLink;
class SubtreeRelay;

// The agent's side of a session with `ddprun --hosts` (nullptr when started by hand).
struct Session {
  HeadLink* link;
  SessionHello hello;
  SubtreeRelay* relay;  // tree fan-out: the hosts this agent starts; nullptr: none
};

// `session`: nullptr for an agent started by hand or by srun.
int run_agent(const LaunchConfig& config, const std::vector<std::string>& notes,
              const std::vector<std::string>& warnings,
              const Session* session);
int run_hosts(const LaunchConfig& config, const std::vector<std::string>& notes,
              const std::vector<std::string>& warnings);
// `args`: the command line after the session flag.
int run_remote(const std::vector<std::string>& args);
int run_dry_run(const LaunchConfig& config);

// Shared by the modes (modes.cpp).

// Whether the worker program can run here, looked up on this process's PATH, and a Python
// worker's script exists.
ProgramCheck check_worker_program(const LaunchConfig& config);
// This program's absolute path (what a --hosts command starts on the hosts by default).
std::string this_executable();

}  // namespace ddprun
