#pragma once
// The end of a one-command job as the person at the terminal sees it: one summary for all hosts,
// the root cause printed once (not once per host), one exit code. Pure formatting over the
// agents' result reports (each agent's summary: launcher/job_report.hpp's summary_json).

#include <string>

#include <nlohmann/json.hpp>

#include "cluster/head.hpp"

namespace ddprun {

// 123 when a check failed or a host was lost without a failure to blame; 128+N when this command
// was stopped by signal N; else the job's: the root cause's exit code, the code of the host
// that left an elastic job under its minimum (123 if it ended without one), 0 when every agent
// succeeded, or the first agent's non-zero code.
int exit_code_of(const ClusterResult& result);

// "cannot start on 1 of 3 hosts:" and one line per failing host with the reason.
std::string format_check_failures(const ClusterResult& result);
// Per host: node, host, ranks, attempts, time, how it ended; then the job's totals.
std::string format_cluster_summary(const ClusterResult& result);
nlohmann::json cluster_summary_json(const ClusterResult& result);

// Prints what applies of the above (stderr) and the closing line.
void report_cluster(const ClusterResult& result);

}  // namespace ddprun
