#pragma once
// The settings every node of a job must share (the restart budget, the rendezvous's and the
// hang detector's timeouts, the program): nodes that disagree would each decide differently
// when a worker fails, so the rendezvous compares them and names the difference.

#include <string>
#include <utility>
#include <vector>

#include "common/launch_config.hpp"

namespace ddprun {

// (flag, value) pairs in a fixed order: {"--max-restarts", "3"}, ...
using JobSettings = std::vector<std::pair<std::string, std::string>>;

// Those of `config` that must agree across nodes.
JobSettings agreed_settings(const LaunchConfig& config);

// The settings as the store keeps them (one JSON object), and back.
std::string encode_settings(const JobSettings& settings);
JobSettings decode_settings(const std::string& text);

// "--max-restarts=0 where node 0 (a) has --max-restarts=3": every difference of `mine` from
// `theirs`, or empty when they agree.
std::string describe_difference(const JobSettings& mine, const JobSettings& theirs,
                                const std::string& them);

}  // namespace ddprun
