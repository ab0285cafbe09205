#pragma once
// The end of a run as the person at the terminal sees it: one exit code for the agent's result,
// and the root-cause block and the closing line, printed once.

#include "agent/agent.hpp"

namespace ddprun {

// 0 on success; the root cause's exit code (125 when it has none); 128+N when this agent was
// stopped by signal N; 124 when the rendezvous or the store failed; 125 for an internal error.
int exit_code_of(const RunResult& result);

// Prints the root-cause block (when there is one) to stderr, then one line with the outcome.
void report(const RunResult& result);

}  // namespace ddprun
