#pragma once
// Figure 6's simulated agents: one process runs `count` of the N agents, each a thread with its
// own TcpStoreClient, through the real elastic protocol (join_round). The coordinator
// (bench_rendezvous) starts as many such processes as the file-descriptor limit requires and
// releases them all at once through the store itself:
//   every process, once its agents are connected, adds its count to "ready" (namespace
//   <run id>-sync); the one that brings it to N sets "all_ready"; the coordinator takes the
//   start time and sets "go", which every process waits for (server-side) before releasing
//   its agents.
// A process prints "RESULT <CLOCK_MONOTONIC when its last agent had its rank>" and
// "PEAK_RSS_KIB <its VmHWM>", and writes its agents' group ranks, one per line, to
// `ranks_file`; or prints "ERROR <message>" and exits 1.

#include <cstdint>
#include <memory>
#include <string>

#include "common/deadline.hpp"
#include "store/store.hpp"

namespace ddprun::bench {

// File descriptors one simulated agent costs its process: its client's socket and the
// client's own descriptors (io_context, eventfd: 5 with the client of 08e159e), and a spare.
inline constexpr long kFdsPerAgent = 6;

// Where the simulated agents rendezvous: a ddprun-store on 127.0.0.1:port, or etcd.
struct StoreTarget {
  std::uint16_t port = 0;
  std::string etcd;  // endpoints; non-empty: etcd instead of the TCP store
};

// A connection to `target` in run id `run_id`'s namespace.
std::unique_ptr<store::Store> connect_store(const StoreTarget& target, const std::string& run_id,
                                     Deadline deadline);

struct AgentProcessOptions {
  StoreTarget target;
  std::string run_id;  // the rendezvous' namespace; the release uses run_id + "-sync"
  int first = 0;       // this process runs agents first .. first + count - 1
  int count = 0;
  int total = 0;       // N, the round's min and max
  std::string ranks_file;
};

// The body of `bench_rendezvous --agent-process`; returns the exit code.
int run_agent_process(const AgentProcessOptions& options);

}  // namespace ddprun::bench
