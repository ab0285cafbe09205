#pragma once
// The hosts of a one-command job: --hosts HOST[:SLOTS],... and --hostfile FILE. Pure parsing
// (no name resolution, no ssh); the order of the hosts is the order of the node ranks.

#include <string>
#include <string_view>
#include <vector>

#include "common/launch_config.hpp"  // HostSpec

namespace ddprun {

// "10.0.0.1:2,10.0.0.2,[::1]:4". Throws ConfigError "<label>=<text>: <what is wrong>" for an
// empty item, a bad slot count (an integer >= 1), or a host listed twice.
std::vector<HostSpec> parse_hosts(std::string_view text, std::string_view label);

// A hostfile's text: one host per line as "host", "host slots=N" (mpirun, DeepSpeed) or
// "host:N"; '#' starts a comment; blank lines are skipped. Throws ConfigError
// "<file>:<line>: <what is wrong>" for a bad line or a duplicate host, and for a file without
// any host.
std::vector<HostSpec> parse_hostfile(std::string_view text, std::string_view file_name);

// Reads and parses FILE; an unreadable file is a ConfigError naming it and the reason.
std::vector<HostSpec> read_hostfile(const std::string& path);

// Slurm's hostlist syntax (SLURM_JOB_NODELIST and the like): "gpu[01-04,07],cpu-a[1-2]" -> gpu01 gpu02 gpu03 gpu04 gpu07
// cpu-a1 cpu-a2; several bracket groups in one name multiply ("x[1-2]y[3-4]"); zero padding
// follows the range's first number. Throws ConfigError naming `what` on malformed text.
std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what);

}  // namespace ddprun
