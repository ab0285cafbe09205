#pragma once
// What `ddprun status` and the metrics make of agents' records (agent/status_board.hpp), as pure
// functions: where the records live in the store, a job's view from its nodes' records, the
// table a person reads, and Prometheus's text exposition format.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/status_board.hpp"
#include "common/deadline.hpp"
#include "store/store.hpp"

namespace ddprun {

// In the job's key space: a counter that hands each agent a slot, and each slot's record.
inline constexpr const char* kStatusSlotsKey = "status/slots";
std::string status_record_key(std::int64_t slot);

// Every record the job's agents published, oldest slot first. Throws the store's errors.
std::vector<NodeStatus> read_status_records(store::Store& store, Deadline deadline);

struct JobView {
  std::string run_id;
  std::vector<NodeStatus> nodes;  // by node rank; one record per agent

  // The job's round, restarts and membership changes: the furthest any node has seen.
  int round() const;
  int restarts() const;
  int max_restarts() const;
  int membership_changes() const;
  double started() const;        // the earliest agent's start (unix seconds)
  std::string state() const;     // "running", "restarting", ..., or the ended state
  bool ended() const;            // every node's agent has ended
  int exit_code() const;         // once ended: the first non-zero agent exit code, else 0
};

// Groups records by run id (a job's records may come from several sources) and keeps the
// newest record of each agent (host and pid). Jobs in the order first seen. A node that is not
// a member of the job's newest round is shown as "gone", without rank or ranks: its record says
// it runs in an older round (an agent that died writes no more), and either every member of the
// newest round has written its record, or it has not been updated for kGoneAfter (`now`, unix
// seconds): a live member publishes its change of round within moments. A node whose fresh
// record says it waits in the rendezvous is a spare for a later round, shown as "spare".
inline constexpr double kGoneAfter = 15;
std::vector<JobView> group_jobs(const std::vector<NodeStatus>& records, double now);

// The table: a job line, a row per node and a row per rank, each cut to `width` columns.
// `now` (unix seconds) ages the records.
std::string render_jobs(const std::vector<JobView>& jobs, int width, double now);

// "1h02m", "4m05s", "12.3s".
std::string format_age(double seconds);

// Prometheus's text format for `nodes` (one agent's own record, or every record of a job for
// a --hosts command); `store_requests` when this process serves the store.
std::string metrics_text(const std::vector<NodeStatus>& nodes,
                         std::optional<std::uint64_t> store_requests, double now);

}  // namespace ddprun
