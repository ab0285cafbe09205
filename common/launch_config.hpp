#pragma once
// LaunchConfig: everything the user asked for, resolved and validated. launcher/ builds it
// from argv and the PET_* environment; every other part receives it and never sees argv.

#include <chrono>
#include <csignal>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun {

// Which worker streams go to files under the log dir (torchrun's -r/--redirects and -t/--tee).
enum class Std : std::uint8_t { kNone = 0, kOut = 1, kErr = 2, kAll = 3 };

// How the nodes meet (--rdzv-backend): a fixed set of nodes through a store on node 0, or an
// elastic membership through a TCP store (c10d) or etcd.
enum class RdzvBackend : std::uint8_t { kStatic, kC10d, kEtcd };
// The flag's value: "static", "c10d", "etcd".
const char* to_string(RdzvBackend backend);

// --dry-run: run, or print the plan as a table or as JSON.
enum class DryRun : std::uint8_t { kOff, kTable, kJson };

// Where each worker may run: by its GPU's place in the machine (--numa-binding, torchrun's
// modes) or by its local rank alone (--cpu-bind). kNone: wherever the agent may.
enum class Binding : std::uint8_t {
  kNone,
  kGpuNode,         // --numa-binding=node: every CPU of the GPU's NUMA node
  kGpuSocket,       // --numa-binding=socket: every CPU of the GPU's package
  kGpuExclusive,    // --numa-binding=exclusive: a share of the node's cores per GPU on it
  kGpuCoreComplex,  // --numa-binding=core-complex: one last-level cache's CPUs per GPU
  kCpuNuma,         // --cpu-bind=numa: rank i on NUMA node i mod N
  kCpuSocket,       // --cpu-bind=socket: rank i on package i mod P
  kCpuCore,         // --cpu-bind=core: the cores split among the ranks
};
// The flag and value that chose it: "--numa-binding=node", "--cpu-bind=core"; "none".
const char* to_string(Binding binding);
inline bool by_gpu(Binding b) {
  return b == Binding::kGpuNode || b == Binding::kGpuSocket || b == Binding::kGpuExclusive ||
         b == Binding::kGpuCoreComplex;
}

// torchrun's port for a c10d rendezvous endpoint given without one.
inline constexpr std::uint16_t kC10dDefaultPort = 29400;

// --fold-output: auto folds on a terminal (a person reads it) and passes every line to a pipe
// or file (a program may parse it, as it would torchrun's); on folds lines equal but for their
// numbers; exact only identical ones.
enum class FoldOutput : std::uint8_t { kAuto, kOff, kOn, kExact };

// --node-check: each node looked at before the job's first workers start (agent/node_check.hpp):
// off; warn, which names what it finds and goes on; refuse, which ends every node with
// kExitNodeCheck when anything is found; exclude (a range of nodes), which ends only the nodes
// named and starts without them, or refuses when the rest would be too few.
enum class NodeCheck : std::uint8_t { kOff, kWarn, kRefuse, kExclude };

// The flag's value: "off", "warn", "refuse", "exclude".
const char* to_string(NodeCheck mode);

// How a job's agents carry out the node check together: what they report, under which store
// keys, in which rounds. Agents of two versions would wait for reports the other never writes,
// so the rendezvous compares it, as part of --node-check's setting (job_settings.hpp). Raised
// whenever any of that changes.
inline constexpr int kNodeCheckProtocol = 2;

// A per-local-rank choice: one value for every rank, or a map with a default of kNone.
struct StdSpec {
  Std all = Std::kNone;
  std::map<int, Std> per_rank;  // when non-empty, overrides `all`
  Std for_rank(int local_rank) const;
};

struct RdzvConf {
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds last_call_timeout{30'000};
  std::chrono::milliseconds close_timeout{30'000};
  std::chrono::milliseconds keep_alive_interval{5'000};
  int keep_alive_max_attempt = 3;
  std::chrono::milliseconds read_timeout{60'000};
  std::optional<bool> is_host;
  std::string etcd_prefix = "/ddprun";  // etcd: the run's keys live under <prefix>/<run id>/
};

// One host of a one-command job (--hosts, --hostfile).
struct HostSpec {
  std::string host;          // as written, without IPv6 brackets: "10.0.0.1", "gpu01", "::1"
  std::optional<int> slots;  // workers on that host; nullopt: --nproc-per-node decides there

  bool operator==(const HostSpec&) const = default;
};

// Cluster mode: this command starts an agent on every host (over ssh) instead of being one.
struct ClusterConfig {
  std::vector<HostSpec> hosts;  // in node-rank order
  // The program and options that reach a host; the host and the remote command are appended.
  std::vector<std::string> ssh_command{"ssh", "-o", "BatchMode=yes"};
  // --hosts=slurm: ssh_command is srun, which runs a program rather than a shell command line.
  bool via_srun = false;
  std::vector<std::string> forward;  // -x: "NAME" or "NAME=VALUE"
  std::string remote_ddprun;         // ddprun's path on the hosts; empty: this executable's
  // A host without this ddprun at remote_ddprun gets a copy in its cache (cluster/staging.hpp).
  bool stage = true;
  // Every host must be reached and pass its checks within this.
  std::chrono::milliseconds connect_timeout{30'000};
  // A remote agent that hears nothing from this command for this long stops its workers.
  std::chrono::milliseconds hangup_timeout{10'000};
  int fanout = 32;  // connections being opened at once; in a tree, connections per agent
  // More hosts than this: tree fan-out (the command reaches `fanout` hosts, which reach the
  // rest); up to this many: the command reaches every host itself.
  int tree_threshold = 64;
  // What every remote agent gets: the flags (as "--name=value") that do not depend on the host,
  // --nproc-per-node's text for hosts without slots (always given: an agent left to choose
  // would take a Slurm step's GPU count), the program and its arguments as the user gave them.
  std::vector<std::string> agent_flags;
  std::string nproc_per_node = "1";
  std::vector<std::string> program_and_args;
};

struct LaunchConfig {
  // Membership.
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 29500;
  RdzvBackend rdzv_backend = RdzvBackend::kStatic;
  std::string rdzv_endpoint;            // host:port for c10d
  std::string rdzv_id = "none";
  // The job's shared secret for the store (--token-file or $DDPRUN_TOKEN); empty: none. Never
  // printed, logged or passed on a command line.
  std::string store_secret;
  RdzvConf rdzv_conf;
  bool standalone = false;
  std::string local_addr;  // empty: this host's name

  // Restarts and monitoring.
  int max_restarts = 0;
  std::chrono::milliseconds monitor_interval{100};  // accepted for compatibility
  std::string start_method = "spawn";              // accepted for compatibility
  std::string role = "default";
  std::chrono::milliseconds shutdown_timeout{30'000};
  std::chrono::milliseconds exit_barrier_timeout{300'000};
  // No progress from any worker of the job for this long is a hang; zero: not watched.
  std::chrono::milliseconds hang_timeout{0};
  NodeCheck node_check = NodeCheck::kOff;
  // --node-check-mib: what each node sends in each pairing of the links check
  // (agent/link_check.hpp); 0: the links are not checked.
  int node_check_mib = 4;
  // --metrics-port (-1: off) and --metrics-addr: where the agent serves Prometheus metrics.
  int metrics_port = -1;
  std::string metrics_addr = "127.0.0.1";
  // The signals passed on to the workers, as numbers: torchrun's four unless
  // --signals-to-handle names others.
  std::vector<int> signals_to_handle{SIGTERM, SIGINT, SIGHUP, SIGQUIT};

  // The program.
  std::vector<std::string> argv;  // final worker command line (interpreter already prepended)
  std::string program;            // as given by the user, for messages
  std::vector<std::string> program_args;  // the program's own arguments, as given
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  // --warm-standby: the modules each standby imports before its handover (empty: torch, when
  // it can be imported); nullopt: no standby (process/standby.hpp).
  std::optional<std::vector<std::string>> warm_standby;
  // LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming the worker's own GPU alone.
  bool virtual_local_rank = false;
  bool mpi_env = false;  // OMPI_COMM_WORLD_* as well
  Binding binding = Binding::kNone;

  // Output.
  std::string log_dir;  // empty: a fresh temp dir, only when some stream is redirected
  StdSpec redirects;
  StdSpec tee;
  std::optional<std::vector<int>> local_ranks_filter;  // nullopt: all ranks reach the console
  std::string log_line_prefix = "[{role}{local_rank}]:";
  bool raw_output = false;  // workers write straight to the agent's stdout/stderr
  // --fold-output: identical lines of different ranks shown once (process/console_fold.hpp).
  FoldOutput fold_output = FoldOutput::kAuto;
  // Set by an agent under --hosts whose command folds: console lines go to it tagged with
  // their rank and host (process/console_fold.hpp), not folded here.
  bool console_tags = false;
  // torchrun's --duplicate-stdout-filters/--duplicate-stderr-filters: console lines containing
  // any of these are also copied to attempt_<n>/filtered_stdout.log (filtered_stderr.log).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::string events_file;  // JSON lines of agent events, empty: none

  std::string log_level = "info";
  DryRun dry_run = DryRun::kOff;
  // A long wait's first progress line comes after this, then at doubling intervals up to a
  // minute; zero: none.
  std::chrono::milliseconds progress_interval{10'000};

  // Set when --hosts or --hostfile was given: the membership fields above describe the job the
  // remote agents form (min/max nodes, master address and port, rendezvous endpoint and id).
  std::optional<ClusterConfig> cluster;

  bool is_static() const { return rdzv_backend == RdzvBackend::kStatic; }
  bool is_etcd() const { return rdzv_backend == RdzvBackend::kEtcd; }
};

}  // namespace ddprun
