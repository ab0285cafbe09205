#pragma once
// The node check as one table, for the command of a --hosts job to print once for every host
// (the job's group rank 0 sends it; docs/reference.md, "Node checks"): a row per node with
// what it saw of itself and its links, then the findings. Bounded whatever the job's size, so
// that it travels as one report line: every node's row up to kTableAllRowsUpTo nodes, beyond
// that only the named nodes' rows (at most kTableAllRowsUpTo of them), and at most
// kTableFindings findings.

#include <cstddef>
#include <string>
#include <vector>

#include "agent/link_check.hpp"
#include "agent/node_check.hpp"

namespace ddprun {

inline constexpr std::size_t kTableAllRowsUpTo = 32;
inline constexpr std::size_t kTableFindings = 32;

// "Node check: 5 nodes, 1 finding (0.84 s)" and the rows, each line ending in '\n'.
std::string format_node_check_table(const std::vector<NodeProbe>& nodes,
                                    const std::vector<Finding>& findings,
                                    const std::vector<LinkFigures>& links, double seconds);

}  // namespace ddprun
