#pragma once
// The settings every node of a job must share, because each node decides on them alone and the job
// behaves as documented only when every node decides alike: the restart budget (each node decides
// whether a failure restarts the job), the hang timeout (each node votes on its own ranks'
// silence), the node check (a node that refuses while another starts would leave the other's
// workers waiting for its ranks) and its protocol's version (agents of two versions would wait
// for reports the other never writes), the keep-alive interval and attempts (a node judges
// its ring neighbour's heartbeats by its own deadline, so a neighbour beating slower than that
// would be taken for dead), and the program: its file name (not its directory: nodes may keep it at
// different paths), a Python script's content, and in an elastic job its arguments, so that two
// jobs given one endpoint and id by mistake are told apart. The rendezvous compares them and names
// the difference. The join and last-call timeouts are each agent's own wait, as under torchrun:
// they may differ.

#include <string>
#include <utility>
#include <vector>

#include "common/launch_config.hpp"

namespace ddprun {

// (flag, value) pairs in a fixed order: {"--max-restarts", "3"}, ...
using JobSettings = std::vector<std::pair<std::string, std::string>>;

// Where the rendezvous keeps a round's records, and what they mean: agents that read them
// differently would each take the other for an outsider, so the rendezvous compares it
// (agreed_settings). Raised whenever any of that changes.
inline constexpr int kRendezvousRecords = 2;

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
