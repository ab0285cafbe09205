#pragma once
// --node-check: before the job's first workers start, each node looks at itself (room in the
// directories the job writes to, /dev/shm, the limits its workers inherit, its GPUs: see
// agent/gpu_check.hpp), publishes what it saw under the round's prefix, and reads every other
// node's. Each node then judges the same reports by the same rules, so every node reaches the
// same verdict without another exchange: a finding is a node under an absolute floor, or far
// under the job's median.
//
// probe_node() makes the system calls; judge() is pure, and the thresholds are here, as
// documented in docs/reference.md ("Node checks").

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/gpu_check.hpp"
#include "common/deadline.hpp"
#include "store/store.hpp"

namespace ddprun {

// A directory the job writes to, below which a node is named: 1 GiB free.
inline constexpr std::uint64_t kMinFreeBytes = std::uint64_t{1} << 30;
// /dev/shm below this much free space is named: NCCL's shared-memory transport and DataLoader
// workers' batches live there, and a container's default of 64 MiB is a known cause of bus
// errors in DataLoader.
inline constexpr std::uint64_t kMinShmFreeBytes = std::uint64_t{256} << 20;
// Soft limits below these are named on any node (a DataLoader with workers and NCCL open
// hundreds of descriptors; every worker thread counts against -u)...
inline constexpr std::uint64_t kMinOpenFiles = 1024;
inline constexpr std::uint64_t kMinProcesses = 1024;
// ...and a limit under this fraction of the job's median, the odd node out, set up apart from
// the rest; for -n and -u only while it is also under kEnoughOpenFiles or kEnoughProcesses
// (machines with more memory get higher defaults: 65536 against 1048576 is no problem). -l has
// no such level: RDMA wants it unlimited.
inline constexpr double kLimitFractionOfMedian = 0.5;
inline constexpr std::uint64_t kEnoughOpenFiles = 65536;
inline constexpr std::uint64_t kEnoughProcesses = 65536;
// getrlimit's RLIM_INFINITY, as reported.
inline constexpr std::uint64_t kUnlimited = ~std::uint64_t{0};

// How long the look at one directory may take: a hung network mount blocks open() and
// statvfs() in the kernel for as long as its server is away, and a look that takes this long
// is a mount in trouble either way.
inline constexpr std::chrono::milliseconds kDirProbeTimeout{10'000};
// The longest a node's look at itself may take: its directories and its GPUs are looked at
// side by side.
inline constexpr std::chrono::milliseconds kNodeProbeTimeout =
    std::max(kDirProbeTimeout, kGpuProbeTimeout);

inline constexpr char kLogDirectory[] = "log directory";
// Where the program lives, or the working directory for a module or a program on PATH. Many
// jobs run code from a read-only image: it is named only when another node can write its own.
inline constexpr char kProgramDirectory[] = "program directory";

struct DirProbe {
  std::string role;   // kLogDirectory or kProgramDirectory
  std::string path;
  std::string error;  // why a file could not be created there; empty: writable
  std::uint64_t free_bytes = 0;  // for an unprivileged user (statvfs f_bavail)
  bool needs_room = true;  // false: judged writable only (a scratch log directory)
  bool timed_out = false;  // the look did not come back within the ProbeInputs' dir_timeout
};

// One node as it saw itself.
struct NodeProbe {
  int node = 0;  // group rank
  std::string host;
  std::vector<DirProbe> dirs;
  bool has_shm = false;  // statvfs of /dev/shm worked
  std::uint64_t shm_size_bytes = 0;
  std::uint64_t shm_free_bytes = 0;
  std::uint64_t open_files = 0;    // soft RLIMIT_NOFILE (ulimit -n) the workers get
  std::uint64_t locked_bytes = 0;  // soft RLIMIT_MEMLOCK (ulimit -l), bytes
  std::uint64_t processes = 0;     // soft RLIMIT_NPROC (ulimit -u)
  int workers = 0;                 // this node's workers (LOCAL_WORLD_SIZE)
  GpuSurvey gpus;                  // the GPUs its workers will see
  std::uint16_t link_port = 0;     // where it takes the links check (agent/link_check.hpp); 0: not
  bool serves_store = false;       // its agent serves the rendezvous store: it cannot be left out
  int min_nodes = 1;               // its --nnodes minimum (nodes need not all be given the same)
  double seconds = 0;  // how long the probe took
};

// What to look at: the directories (those that are empty are skipped) and where /dev/shm is.
struct ProbeInputs {
  int node = 0;
  std::string host;
  std::string log_dir;
  bool log_dir_is_scratch = false;
  std::string program_dir;
  std::string shm_dir = "/dev/shm";
  std::chrono::milliseconds dir_timeout = kDirProbeTimeout;
  int workers = 0;
  // The workers' CUDA_VISIBLE_DEVICES (nullopt: unset), which says which GPUs are theirs.
  std::optional<std::string> cuda_visible_devices;
  std::chrono::milliseconds gpu_timeout = kGpuProbeTimeout;
};

NodeProbe probe_node(const ProbeInputs& inputs);

nlohmann::json to_json(const NodeProbe& probe);
// Throws ProtocolError naming the node when `j` is not a probe.
NodeProbe probe_from_json(const nlohmann::json& j);

struct Finding {
  int node = 0;
  std::string host;
  std::string what;  // "/dev/shm has 64 MiB free of 64 MiB (at least 256 MiB needed)"
  // The other node of a finding about two (a link, named on its sender; two clocks that
  // disagree with no majority to tell which is off); -1: a finding about `node` itself.
  int link_to = -1;
  // "node 1 (host-b): /dev/shm has ..."
  std::string line() const;
};

// The findings as the events file holds them: node, host and what, each.
nlohmann::json to_json(const std::vector<Finding>& findings);

// Every finding about these nodes, node by node, in a fixed order.
std::vector<Finding> judge(const std::vector<NodeProbe>& nodes);

// A node that comes after the job's first round, judged as one more member of it: `mine` (its
// `node` numbered after theirs) against the reports the first round's members published. The
// reference leaves out the members the check named itself: counted, a named member would pull
// the medians toward what is wrong with it, and its report is still in the store when its
// agent, started again unchanged, comes back as `mine`.
struct LateVerdict {
  std::vector<Finding> findings;  // about `mine` only
  std::size_t compared_with = 0;  // the members it was judged against
};
LateVerdict judge_late(std::vector<NodeProbe> first_round, const NodeProbe& mine);

// What --node-check=exclude does with the findings: the nodes named as nodes, to start without,
// or, when the job cannot go on without them, why not. A finding about two nodes is not pinned
// on either (the check cannot tell which is at fault): it excludes neither. The minimum is the
// largest of the nodes' own, so that every node decides alike whatever it was given.
struct Exclusion {
  std::vector<int> nodes;  // in order, no node twice
  std::string refused;     // non-empty: why the job cannot start without `nodes`
};
Exclusion plan_exclusion(const std::vector<Finding>& findings,
                         const std::vector<NodeProbe>& nodes);

// The healthy line's word on the GPUs: "; 8 GPU(s)" visible to the nodes' workers, "" when no
// node has NVIDIA's driver.
std::string gpus_summary(const std::vector<NodeProbe>& nodes);

// Findings node by node, each node's in the order found.
void order_by_node(std::vector<Finding>& findings);

// The middle value; of two, the upper one (so that unlimited needs no arithmetic). Not empty.
template <class T>
T upper_median(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// "64 MiB", "1.5 GiB", "1000 MiB", "unlimited".
std::string format_bytes(std::uint64_t bytes);
// A limit as ulimit shows it: a count, or bytes (format_bytes); "unlimited".
std::string format_limit(std::uint64_t value, bool bytes);

// One exchange of the check: publishes `mine` as node `me` under `prefix` and reads every node's
// value, `nodes` of them in node order, waiting until `deadline` (TimeoutError that says which
// `report`, "its check" or "its links", not every node gave).
std::vector<std::string> exchange_reports(store::Store& store, const std::string& prefix, int me,
                                          const std::string& mine, int nodes,
                                          const std::string& report, Deadline deadline);

// Publishes `mine` under "<prefix>/node_check/<node>" and reads the `nodes` nodes' probes,
// waiting for them until `deadline` (TimeoutError, which says the check waited for the other
// nodes' reports, and the store's own text with the keys).
std::vector<NodeProbe> exchange_probes(store::Store& store, const std::string& prefix,
                                       const NodeProbe& mine, int nodes, Deadline deadline);

// The probes the `nodes` nodes of a round published under "<prefix>/node_check", in node order,
// without publishing one: those there by `wait` (a node that died before its report has none),
// each read within `read_timeout`. For a node that comes after the round.
std::vector<NodeProbe> read_probes(store::Store& store, const std::string& prefix, int nodes,
                                   Deadline wait, std::chrono::milliseconds read_timeout);

}  // namespace ddprun
