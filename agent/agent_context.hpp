#pragma once
// What an agent runs on: the store, the rendezvous, the runner, and where things go. The
// launcher builds it (launcher/run_agent.cpp); the agent and its attempts only use it.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/env_map.hpp"
#include "common/placement.hpp"
#include "process/process_runner.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "store/store.hpp"

namespace ddprun {

class EventLog;
class StatusBoard;

struct AgentContext {
  std::string host;        // this node's name, for messages and the root cause
  store::Store* store = nullptr;  // the agent's own connection (rendezvous and coordination)
  store::StoreOpener open_store;  // more connections, for threads that block on their own
  RendezvousHandler* rendezvous = nullptr;
  ProcessRunner* runner = nullptr;
  // Opens a workers' store for a round and returns its port, the workers' MASTER_PORT (group
  // rank 0 only; agent/workers_stores.hpp).
  std::function<int()> open_workers_store;
  std::string log_dir;         // this run's log directory (attempt_<round>/<local_rank>/...)
  // The log directory is a scratch one, removed at the end, that holds no worker output (only
  // error files and stacks): --node-check asks it to be writable, not to have room.
  bool log_dir_is_scratch = false;
  EnvMap base_env;             // the environment workers inherit
  EventLog* events = nullptr;  // --events-file, optional
  StatusBoard* status = nullptr;  // what `ddprun status` and the metrics show, optional
  // The connection of the last round's outcome watcher, once it read the outcome: the next
  // watcher uses it instead of opening one (a recovery then costs the store's host no
  // connection per node). See agent/settlement.hpp.
  std::unique_ptr<store::Store> spare_watch_store;
  bool hosts_store = false;    // this agent's process serves the store: it leaves last
  // --hosts: the node check's table goes to the command, which prints it once for every host
  // (group rank 0 sends it; the agents keep their finding lines to their debug log). Null:
  // each agent prints its findings.
  std::function<void(const std::string& table, std::size_t findings)> report_node_check;
  // --numa-binding / --cpu-bind: each local rank's placement, planned at start; empty: none.
  std::vector<Placement> placements;
};

}  // namespace ddprun
