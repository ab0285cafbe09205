#pragma once
// The ddprun command line: torchrun's flags (both spellings, PET_* environment fallback)
// plus ddprun's own, turned into a LaunchConfig. Nothing here starts processes or exits.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/exit_codes.hpp"
#include "common/launch_config.hpp"

namespace ddprun {


struct CliOutcome {
  // Set when the job should run. When empty, print `message` (to stdout for exit code 0,
  // stderr otherwise) and exit with `exit_code`.
  std::optional<LaunchConfig> config;
  int exit_code = kExitOk;
  // Help text, "ddprun <version>", or one line "ddprun: <flag>=<value>: <what is wrong>".
  std::string message;
  // With a config: one-line notices for the startup log (what --standalone chose, ignored
  // flags). Never errors.
  std::vector<std::string> notes;
  std::vector<std::string> warnings;  // the same, for the log's warning level
};

// `args`: argv without argv[0]. `env`: the process environment; every flag --foo-bar falls
// back to PET_FOO_BAR from it (empty values count as unset), and PYTHON_EXEC and
// CUDA_VISIBLE_DEVICES are read from it. The first positional argument is the program;
// it and everything after it are the program's, untouched. A leading "--" before the
// program is dropped. May load the CUDA driver for --nproc-per-node=gpu/auto. Never throws
// for bad input.
CliOutcome parse_command_line(const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env);

// What a flag means to a one-command job (--hosts, --hostfile), from the option table.
enum class HostsRole : std::uint8_t {
  kTravels,      // passed on to every host's agent as given
  kNeedsHosts,   // means something only with --hosts or --hostfile, and only to the command
  kCommandOnly,  // the command's own besides those: never passed on to the agents
  kSetPerHost,   // the command sets it for each host itself
};
// A long option's role, in our spelling; kTravels for a name the table does not have.
HostsRole hosts_role(std::string_view flag);
// The long options with `role`, in the table's order.
std::vector<std::string_view> flags_with_hosts_role(HostsRole role);

// Every long option's name in our spelling ("nproc-per-node"), --help and --version included.
std::vector<std::string_view> long_option_names();

// What "--NAME" stands for, by argparse's rules, which torchrun's command line follows: an exact
// name first; otherwise a prefix of exactly one option's name stands for it, or of exactly one
// of torchrun's among several (what torchrun reads it as), and any other prefix of several is
// an error naming them. `name` is in our spelling (dashes, not underscores), so an option's two
// spellings count as one.
struct LongOptionMatch {
  std::string name;                     // the full name; empty when unknown or ambiguous
  std::vector<std::string> candidates;  // every name it is a prefix of, when ambiguous
};
LongOptionMatch match_long_option(std::string_view name);
// Whether torchrun (of some version) has this long option; `name` in our spelling.
bool is_torchrun_option(std::string_view name);

// The full --help text.
std::string help_text();

}  // namespace ddprun
