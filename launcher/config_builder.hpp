#pragma once
// Turns the raw text of the launcher's flags into a validated LaunchConfig. The CLI layer
// (cli.cpp) only tokenizes argv and merges in the PET_* environment; every rule about what
// a value means and which combinations are allowed lives here and, for the --hosts command's
// own flags, in hosts_config.hpp.

#include <map>
#include <string>
#include <vector>

#include "common/launch_config.hpp"

namespace ddprun {

// One flag's value as the user wrote it.
struct RawValue {
  std::string text;              // as written; a flag given without a value is "true"
  std::string label;             // where it came from, for messages: "--nnodes" or "PET_NNODES"
  bool from_command_line = true;
};

// Keyed by the flag's long name with dashes and without "--": "nproc-per-node", "module".
// A flag that was given neither on the command line nor in the environment is absent.
using RawOptions = std::map<std::string, RawValue, std::less<>>;

struct BuiltConfig {
  LaunchConfig config;
  // One-line notices for the startup log (e.g. what --standalone chose); not errors.
  std::vector<std::string> notes;
  // The same at warning level: what the user should fix although the job can run.
  std::vector<std::string> warnings;
};

// `program_and_args`: the program and everything after it, untouched. `env`: the process
// environment (PYTHON_EXEC, CUDA_VISIBLE_DEVICES). `forward`: the -x entries. May probe the
// CUDA driver for --nproc-per-node=gpu/auto (not with --hosts: each host resolves its own).
// Throws ConfigError with a one-line message naming the flag.
BuiltConfig build_launch_config(const RawOptions& options,
                                const std::vector<std::string>& program_and_args,
                                const std::map<std::string, std::string>& env,
                                const std::vector<std::string>& forward = {});

}  // namespace ddprun
