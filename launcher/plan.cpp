#include "launcher/plan.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/worker_env.hpp"
#include "cluster/session_protocol.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"
#include "rendezvous/rank_assignment.hpp"

namespace ddprun {

namespace {

using nlohmann::json;

constexpr const char* kPortNote = "the workers' store on the master, one for each attempt";
constexpr const char* kErrorFileNote = "a file under the log directory, per attempt";
constexpr const char* kFlightRecorderNote = "<log dir>/attempt_<n>/<local rank>/nccl_trace_rank_";

std::string nnodes_text(const LaunchConfig& c) {
  return c.min_nodes == c.max_nodes ? std::to_string(c.max_nodes)
                                    : fmt::format("{}:{}", c.min_nodes, c.max_nodes);
}

// The worker counts of the nodes when every one is known before the rendezvous (empty if not).
std::vector<int> known_sizes(const LaunchConfig& c) {
  if (!c.is_static()) return {};  // elastic: who takes part is decided by the rendezvous
  if (!c.cluster) {
    if (c.max_nodes != 1) return {};  // the other nodes' counts are theirs
    return {c.nproc_per_node};
  }
  std::vector<int> sizes;
  for (const auto& host : c.cluster->hosts) {
    if (host.slots) {
      sizes.push_back(*host.slots);
    } else if (auto n = parse_int(c.cluster->nproc_per_node)) {
      sizes.push_back(static_cast<int>(*n));
    } else {
      return {};  // cpu/gpu/auto: resolved on that host
    }
  }
  return sizes;
}

json rendezvous_json(const LaunchConfig& c) {
  json r{{"backend", to_string(c.rdzv_backend)}, {"nnodes", nnodes_text(c)}, {"run_id", c.rdzv_id}};
  if (c.is_static()) {
    r["master_addr"] = c.master_addr;
    r["master_port"] = c.master_port;
  } else {
    r["endpoint"] = c.rdzv_endpoint;
  }
  return r;
}

}  // namespace

json make_plan(const LaunchConfig& c, const std::map<std::string, std::string>& env,
               const std::vector<std::vector<std::string>>& commands) {
  json plan{{"dry_run", true},
            {"version", ddprun_version()},
            {"rendezvous", rendezvous_json(c)},
            {"program", c.argv}};
  if (c.cluster) {
    // The interpreter is chosen on each host: PYTHON_EXEC there (forwarded from here, if set).
    plan["program"] = c.cluster->program_and_args;
    plan["interpreter"] = c.no_python ? json() : json(c.argv.front());
  }
  const auto sizes = known_sizes(c);
  const auto ranks = sizes.empty() ? std::vector<NodeRanks>() : assign_all_ranks(sizes);
  auto nodes = json::array();
  const int node_count = c.cluster ? static_cast<int>(c.cluster->hosts.size()) : 1;
  for (int i = 0; i < node_count; ++i) {
    json node{{"node", c.cluster || c.is_static() ? json(c.cluster ? i : c.node_rank) : json()}};
    if (c.cluster) {
      const auto& host = c.cluster->hosts[static_cast<std::size_t>(i)];
      node["host"] = host.host;
      node["workers"] = host.slots ? json(*host.slots) : json(c.cluster->nproc_per_node);
      if (static_cast<std::size_t>(i) < commands.size()) node["command"] = commands[i];
    } else {
      node["host"] = c.local_addr.empty() ? json() : json(c.local_addr);
      node["workers"] = c.nproc_per_node;
    }
    if (!ranks.empty()) {
      const auto& r = ranks[static_cast<std::size_t>(i)];
      node["ranks"] = {r.base_rank, r.base_rank + r.local_world_size - 1};
      node["world_size"] = r.world_size;
    }
    nodes.push_back(node);
  }
  plan["nodes"] = nodes;

  // What the workers inherit that changes their variables: the agent keeps these when set.
  std::map<std::string, std::string> base;
  const auto inherited = c.cluster ? forwarded_environment(env, c.cluster->forward) : env;
  for (const char* name :
       {"OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "CUDA_VISIBLE_DEVICES"}) {
    if (auto it = inherited.find(name); it != inherited.end()) base[name] = it->second;
  }
  auto workers = json::array();
  for (std::size_t g = 0; g < ranks.size(); ++g) {
    for (int local = 0; local < ranks[g].local_world_size; ++local) {
      WorkerEnvInput in;
      in.ranks = ranks[g];
      in.local_rank = local;
      in.role = c.role;
      in.master_addr = c.master_addr;
      in.max_restarts = c.max_restarts;
      in.run_id = c.rdzv_id;
      in.set_omp_threads = ranks[g].local_world_size > 1;
      in.virtual_local_rank = c.virtual_local_rank;
      in.mpi_env = c.mpi_env;
      in.signals_to_handle = c.signals_to_handle;
      // Set as in a real run, so that the Flight Recorder's variables show; the value is a note.
      in.flight_recorder_prefix = kFlightRecorderNote;
      auto vars = build_worker_env(base, in);
      vars["MASTER_PORT"] = kPortNote;
      vars["TORCHELASTIC_ERROR_FILE"] = kErrorFileNote;
      workers.push_back({{"node", g}, {"local_rank", local}, {"rank", ranks[g].global_rank(local)},
                         {"env", vars}});
    }
  }
  plan["workers"] = workers;
  if (c.cluster) {
    auto names = json::array();
    for (const auto& [name, value] : forwarded_environment(env, c.cluster->forward)) {
      names.push_back(name);
    }
    plan["forwarded_env"] = names;
  }
  return plan;
}

std::string format_plan(const json& plan) {
  const auto& r = plan["rendezvous"];
  std::string out = fmt::format("ddprun --dry-run: the plan (nothing was started), ddprun {}\n",
                                plan["version"].get<std::string>());
  out += fmt::format("  rendezvous   {}, {} node(s), {}, run id {}\n", r["backend"].get<std::string>(),
                     r["nnodes"].get<std::string>(),
                     r.contains("endpoint")
                         ? (r["backend"] == "etcd" ? "etcd at " : "store at ") +
                               r["endpoint"].get<std::string>()
                         : fmt::format("master {}:{}", r["master_addr"].get<std::string>(),
                                       r["master_port"].get<int>()),
                     r["run_id"].get<std::string>());
  out += fmt::format("  program      {}{}\n",
                     shell_join(plan["program"].get<std::vector<std::string>>()),
                     plan.contains("interpreter") && !plan["interpreter"].is_null()
                         ? fmt::format(" (with {} -u, or $PYTHON_EXEC, on each host)",
                                       plan["interpreter"].get<std::string>())
                         : std::string());
  std::size_t host_width = 4;
  for (const auto& n : plan["nodes"]) {
    host_width = std::max(host_width, n["host"].is_null() ? 1 : n["host"].get<std::string>().size());
  }
  out += fmt::format("  {:<4}  {:<{}}  {:<7}  {}\n", "node", "host", host_width, "workers", "ranks");
  for (const auto& n : plan["nodes"]) {
    const auto node = n["node"].is_null() ? std::string("?") : std::to_string(n["node"].get<int>());
    const auto host = n["host"].is_null() ? std::string("-") : n["host"].get<std::string>();
    const auto workers = n["workers"].is_string() ? n["workers"].get<std::string>()
                                                  : std::to_string(n["workers"].get<int>());
    std::string ranks = "decided at the rendezvous";
    if (n.contains("ranks")) {
      NodeRanks node_ranks;
      node_ranks.base_rank = n["ranks"][0];
      node_ranks.local_world_size = n["ranks"][1].get<int>() - node_ranks.base_rank + 1;
      node_ranks.world_size = n["world_size"];
      ranks = ranks_text(node_ranks);
    }
    out += fmt::format("  {:<4}  {:<{}}  {:<7}  {}\n", node, host, host_width, workers, ranks);
  }
  const bool staging = plan.contains("staging");
  for (const auto& n : plan["nodes"]) {
    if (!n.contains("command")) continue;
    auto command = n["command"].get<std::vector<std::string>>();
    // The staging script is the same for every host and long: said once, below.
    if (staging) command.back() = "<staging script>";
    out += fmt::format("  command for node {}: {}\n", n["node"].get<int>(), shell_join(command));
    if (n.contains("args")) {
      out += fmt::format("    its agent's arguments (in the session's hello): {}\n",
                         shell_join(n["args"].get<std::vector<std::string>>()));
    }
  }
  if (staging) {
    const auto& st = plan["staging"];
    out += fmt::format(
        "  staging script: each host runs {} when it is ddprun {}, else the copy of this ddprun "
        "(SHA-256 {}, {} bytes) in its cache, sent when missing or damaged; --no-stage: no "
        "copy; --dry-run=json shows the script\n",
        st["remote_ddprun"].get<std::string>(), st["version"].get<std::string>(),
        st["sha256"].get<std::string>(), st["size"].get<std::size_t>());
  }
  if (plan.contains("forwarded_env")) {
    out += fmt::format("  forwarded to every host (values not shown): {}\n",
                       fmt::join(plan["forwarded_env"].get<std::vector<std::string>>(), " "));
  }
  if (plan.contains("placement")) {
    const auto& p = plan["placement"];
    out += fmt::format("  placement ({}; {}):\n", p["binding"].get<std::string>(),
                       p["machine"].get<std::string>());
    for (const auto& rank : p["ranks"]) {
      out += fmt::format("    local rank {}: {}\n", rank["local_rank"].get<int>(),
                         rank["description"].get<std::string>());
    }
  }
  if (plan["workers"].empty()) {
    out += "  worker environment: decided at the rendezvous (ranks and world size)\n";
  } else {
    out += fmt::format("  worker environment (MASTER_PORT: {}; TORCHELASTIC_ERROR_FILE: {}; "
                       "TORCH_NCCL_DEBUG_INFO_TEMP_FILE and TORCH_FR_DUMP_TEMP_FILE: {}):\n",
                       kPortNote, kErrorFileNote, kFlightRecorderNote);
    for (const auto& w : plan["workers"]) {
      std::string vars;
      for (const auto& [key, value] : w["env"].items()) {
        // What the header describes, the same for every rank.
        if (key == "MASTER_PORT" || key == "TORCHELASTIC_ERROR_FILE" ||
            value.get<std::string>() == kFlightRecorderNote) {
          continue;
        }
        vars += fmt::format(" {}={}", key, value.get<std::string>());
      }
      out += fmt::format("    rank {}:{}\n", w["rank"].get<int>(), vars);
    }
  }
  return out;
}

}  // namespace ddprun
