#pragma once
// The --hosts / --hostfile command's part of building a LaunchConfig (config_builder.hpp): the
// host list, how hosts are reached, and the flags every remote agent gets.

#include <map>
#include <string>
#include <vector>

#include "launcher/config_builder.hpp"

namespace ddprun {

// Without --hosts or --hostfile: throws ConfigError for a flag that means something only with
// them (--ssh-command, --fanout, ..., -x entries in `forward`) given on the command line.
void check_no_hosts_flags(const RawOptions& raw, const std::vector<std::string>& forward);

// --hosts/--hostfile: the job the remote agents form, checked here once, so that a mistake is
// reported before any host is contacted; sets out.config.cluster. Returns the options every
// agent's rendezvous is built from (the membership the host list implies), for the agent's
// part of the build to check as usual. Throws ConfigError.
RawOptions build_hosts_config(const RawOptions& raw, const std::vector<std::string>& forward,
                              const std::map<std::string, std::string>& env, BuiltConfig& out);

}  // namespace ddprun
