#pragma once
// The end of a run as the person at the terminal sees it: one exit code for the agent's result,
// a summary of the node's attempts, the root-cause block, and the closing line, printed once.

#include <string>

#include <nlohmann/json.hpp>

#include "agent/agent.hpp"

namespace ddprun {

// 0 on success; the root cause's exit code (125 when it has none); 128+N when this agent was
// stopped by signal N; 124 when the rendezvous or the store failed; 125 for an internal error.
int exit_code_of(const RunResult& result);

// The summary block: this node's attempts (round, ranks, nodes, how each ended, how long) and
// the totals (restarts spent of the maximum, membership changes, total time).
std::string format_summary(const RunResult& result);
// The same data for --events-file.
nlohmann::json summary_json(const RunResult& result);

// Prints the summary, then the root-cause block when there is one (stderr), then one line with
// the outcome.
// `log_dir`: this node's log directory, shown in the root cause, when the user did not name it
// and it is kept (--redirects or --tee); empty otherwise.
void report(const RunResult& result, const std::string& log_dir = "");

}  // namespace ddprun
