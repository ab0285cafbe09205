#include "launcher/config_builder.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/gpu_check.hpp"
#include "common/env_map.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"
#include "etcd/etcd_client.hpp"
#include "launcher/config_summary.hpp"
#include "launcher/cpu_count.hpp"
#include "launcher/gpu_count.hpp"
#include "launcher/hosts_config.hpp"
#include "launcher/option_reader.hpp"
#include "launcher/slurm.hpp"
#include "launcher/value_parsers.hpp"
#include "store/store_auth.hpp"

namespace ddprun {
namespace {

// --node-check-mib: beyond this the check is a benchmark, not a check before the job.
constexpr int kMaxNodeCheckMib = 1024;

// An address without a port; IPv6 may be written with brackets, which are dropped.
std::string parse_address(const RawValue& value) {
  HostPort host_port = parse_host_port(value.text, value.label);
  if (host_port.port) {
    throw ConfigError(
        fmt::format("{}={}: expected an address without a port", value.label, value.text));
  }
  return host_port.host;
}

// --nproc-per-node's value checked without resolving it (with --hosts, each host resolves
// cpu/gpu/auto itself).
std::string check_nproc_per_node_text(const RawValue& value) {
  std::string text(trim(value.text));
  if (text == "cpu" || text == "gpu" || text == "auto") return text;
  auto count = parse_int(text);
  if (!count || *count <= 0 || *count > 1'000'000) {
    throw ConfigError(fmt::format("{}={}: expected a number of workers >= 1, cpu, gpu or auto",
                                  value.label, value.text));
  }
  return text;
}

int resolve_nproc_per_node(const RawValue& value,
                           const std::map<std::string, std::string>& env) {
  auto text = trim(value.text);
  auto gpu_count = [&] {
    auto visible = env.find("CUDA_VISIBLE_DEVICES");
    if (visible != env.end()) {
      if (cuda_devices_hidden(visible->second)) return 0;
    }
    return visible_cuda_devices();
  };
  if (text == "cpu") return usable_cpu_count();
  if (text == "gpu") {
    int gpus = gpu_count();
    if (gpus == 0) {
      throw ConfigError(fmt::format("{}={}: no CUDA device is visible", value.label, value.text));
    }
    return gpus;
  }
  if (text == "auto") {
    int gpus = gpu_count();
    return gpus > 0 ? gpus : usable_cpu_count();
  }
  auto count = parse_int(text);
  if (!count || *count <= 0 || *count > 1'000'000) {
    throw ConfigError(fmt::format("{}={}: expected a number of workers >= 1, cpu, gpu or auto",
                                  value.label, value.text));
  }
  return static_cast<int>(*count);
}

void build_rendezvous(const OptionReader& options, BuiltConfig& out) {
  LaunchConfig& config = out.config;
  if (auto* v = options.find("nnodes")) {
    std::tie(config.min_nodes, config.max_nodes) = parse_nnodes(v->text, v->label);
  }
  if (auto* v = options.find("rdzv-backend")) {
    config.rdzv_backend = parse_rdzv_backend(*v);
  }
  if (auto* v = options.find("rdzv-id")) config.rdzv_id = parse_nonempty(*v);
  if (auto* v = options.find("master-addr")) config.master_addr = parse_address(*v);
  if (auto* v = options.find("master-port")) config.master_port = parse_port(v->text, v->label);
  if (auto* v = options.find("local-addr")) config.local_addr = parse_address(*v);
  if (auto* v = options.find("rdzv-conf")) {
    std::vector<std::string> unknown;
    config.rdzv_conf = parse_rdzv_conf(v->text, v->label, &unknown);
    if (!unknown.empty()) {
      out.notes.push_back(fmt::format("{}: ignoring {} (not a key ddprun's rendezvous uses)",
                                      v->label, fmt::join(unknown, ", ")));
    }
  }
  if (auto* v = options.find("node-rank")) config.node_rank = parse_int_at_least(v->text, v->label, 0);
  const RawValue* endpoint = options.find("rdzv-endpoint");

  config.standalone = options.flag("standalone");
  if (config.standalone) {
    std::string ignored;
    for (auto key : {"rdzv-backend", "rdzv-endpoint", "rdzv-id", "nnodes"}) {
      if (options.find(key) != nullptr) ignored += " " + options.label(key);
    }
    if (!ignored.empty()) {
      out.notes.push_back(fmt::format("--standalone: ignoring{}", ignored));
    }
    // One node needs no elastic machinery: the static rendezvous, which for one node keeps the
    // store in the agent's memory (rendezvous/backend.hpp); the workers' master port is a free
    // one on 127.0.0.1 (port 0).
    config.rdzv_backend = RdzvBackend::kStatic;
    config.master_addr = "127.0.0.1";
    config.master_port = 0;
    config.min_nodes = config.max_nodes = 1;
    config.node_rank = 0;
    config.rdzv_id = random_run_id();
    out.notes.push_back(fmt::format(
        "--standalone: single node, rendezvous in this agent's memory, run id {}",
        config.rdzv_id));
    return;
  }

  if (config.is_static()) {
    if (config.min_nodes != config.max_nodes) {
      throw ConfigError(fmt::format("{}={}:{}: a range of nodes needs an elastic rendezvous: "
                                    "--rdzv-backend=c10d or etcd",
                                    options.label("nnodes"), config.min_nodes, config.max_nodes));
    }
    // torchrun's static rendezvous takes the master's address from --rdzv-endpoint when given.
    if (endpoint != nullptr && !trim(endpoint->text).empty()) {
      HostPort host_port = parse_host_port(endpoint->text, endpoint->label);
      if (!host_port.port) {
        throw ConfigError(fmt::format("{}={}: the static rendezvous needs host:port",
                                      endpoint->label, endpoint->text));
      }
      config.master_addr = host_port.host;
      config.master_port = *host_port.port;
    }
    if (config.node_rank >= config.max_nodes) {
      throw ConfigError(fmt::format("{}={}: must be < the number of nodes ({})",
                                    options.label("node-rank"), config.node_rank,
                                    config.max_nodes));
    }
    return;
  }

  if (config.is_etcd()) {
    // etcd's own default client URL when none is given.
    config.rdzv_endpoint = endpoint != nullptr && !trim(endpoint->text).empty()
                               ? std::string(trim(endpoint->text))
                               : std::string("localhost:2379");
    parse_etcd_endpoints(config.rdzv_endpoint, endpoint ? endpoint->label : "--rdzv-endpoint");
    return;
  }

  // c10d. Like torchrun, an empty endpoint means localhost, which only works on one node.
  std::string host = "localhost";
  std::uint16_t port = kC10dDefaultPort;
  if (endpoint != nullptr && !trim(endpoint->text).empty()) {
    HostPort host_port = parse_host_port(endpoint->text, endpoint->label);
    host = host_port.host;
    port = host_port.port.value_or(kC10dDefaultPort);
  } else if (config.max_nodes > 1) {
    out.notes.push_back(fmt::format(
        "no --rdzv-endpoint: using localhost:{}, which other nodes cannot reach", port));
  }
  config.rdzv_endpoint = format_host_port(host, port);
}

// --fold-output[=MODE] and torchrun's duplicate filters: both act on the lines the agent prints,
// which --raw-output sends past it.
void build_console_folding(const OptionReader& options, LaunchConfig& config) {
  if (const RawValue* v = options.find("fold-output")) {
    const auto text = trim(v->text);
    if (text == "auto") {
      config.fold_output = FoldOutput::kAuto;
    } else if (text == "exact") {
      config.fold_output = FoldOutput::kExact;
    } else if (auto on = parse_bool(text)) {
      config.fold_output = *on ? FoldOutput::kOn : FoldOutput::kOff;
    } else {
      throw ConfigError(fmt::format("{}={}: expected auto, on, exact or off", v->label, v->text));
    }
    if (config.raw_output &&
        (config.fold_output == FoldOutput::kOn || config.fold_output == FoldOutput::kExact)) {
      throw ConfigError(fmt::format("{} folds the lines the agent prints, which --raw-output "
                                    "sends past it: use one or the other", v->label));
    }
  }
  for (auto [name, filters] :
       {std::pair{"duplicate-stdout-filters", &config.duplicate_stdout_filters},
        std::pair{"duplicate-stderr-filters", &config.duplicate_stderr_filters}}) {
    const RawValue* v = options.find(name);
    if (v == nullptr) continue;
    *filters = parse_filter_list(v->text);
    if (config.raw_output && !filters->empty()) {
      throw ConfigError(fmt::format("{} copies the lines the agent prints, which --raw-output "
                                    "sends past it: use one or the other", v->label));
    }
  }
}

// --warm-standby[=MOD,...]: a boolean, or the modules to import ahead.
void build_warm_standby(const OptionReader& options, BuiltConfig& out) {
  LaunchConfig& config = out.config;
  const RawValue* v = options.find("warm-standby");
  if (v == nullptr) return;
  std::vector<std::string> modules;
  if (auto on = parse_bool(v->text)) {
    if (!*on) return;
  } else {
    for (const auto& name : split(v->text, ',')) {
      const auto module = std::string(trim(name));
      const bool valid = !module.empty() && module.front() != '.' && module.back() != '.' &&
                         std::all_of(module.begin(), module.end(), [](unsigned char c) {
                           return std::isalnum(c) || c == '_' || c == '.';
                         });
      if (!valid) {
        throw ConfigError(fmt::format("{}={}: expected a boolean or Python module names "
                                      "(torch,numpy)", v->label, v->text));
      }
      modules.push_back(module);
    }
  }
  if (config.max_restarts == 0 && config.is_static()) {
    out.notes.push_back(fmt::format("{}: no restart can happen (--max-restarts=0, static "
                                    "rendezvous): no standby is kept", v->label));
    return;
  }
  config.warm_standby = std::move(modules);
}

void build_program(const OptionReader& options, const std::vector<std::string>& program_and_args,
                   const std::map<std::string, std::string>& env, BuiltConfig& out) {
  LaunchConfig& config = out.config;
  config.module = options.flag("module");
  config.no_python = options.flag("no-python");
  if (options.flag("pass-local-rank") && options.flag("use-env")) {
    throw ConfigError(fmt::format("{} and {} cannot be used together (--use-env is "
                                  "torch.distributed.launch's way of asking for no --local_rank)",
                                  options.label("pass-local-rank"), options.label("use-env")));
  }
  if (options.flag("pass-local-rank") && options.flag("no-python")) {
    throw ConfigError(fmt::format("{} needs a Python script (not {})",
                                  options.label("pass-local-rank"), options.label("no-python")));
  }
  config.run_path = options.flag("run-path");
  if (config.no_python && config.module) {
    throw ConfigError(fmt::format("{} and {} cannot be used together", options.label("no-python"),
                                  options.label("module")));
  }
  if (program_and_args.empty() || program_and_args.front().empty()) {
    throw ConfigError("missing the program to run (usage: ddprun [OPTIONS] PROGRAM [ARGS...])");
  }
  config.program = program_and_args.front();
  config.program_args.assign(program_and_args.begin() + 1, program_and_args.end());
  // Like torchrun, --run-path always runs the script with Python, whatever else was asked.
  if (config.run_path && (config.no_python || config.module)) {
    out.notes.push_back(fmt::format("{}: running {} as a Python script", options.label("run-path"),
                                    config.program));
    config.no_python = config.module = false;
  }
  if (config.no_python) {
    config.argv = program_and_args;
    return;
  }
  std::string python = env_value(env, "PYTHON_EXEC");
  config.argv = {python.empty() ? "python3" : python, "-u"};
  if (config.module) config.argv.push_back("-m");
  config.argv.push_back(program_and_args.front());
  // torch.distributed.launch's form: --local_rank=N right after the script, before its own
  // arguments (${local_rank} becomes each worker's local rank).
  if (options.flag("pass-local-rank")) config.argv.push_back("--local_rank=${local_rank}");
  config.argv.insert(config.argv.end(), program_and_args.begin() + 1, program_and_args.end());
}

// --virtual-local-rank, --mpi-env, --numa-binding and --cpu-bind: what each worker sees of the
// machine.
void build_placement(const OptionReader& options, const std::map<std::string, std::string>& env,
                     LaunchConfig& config) {
  config.virtual_local_rank = options.flag("virtual-local-rank");
  config.mpi_env = options.flag("mpi-env");
  const RawValue* numa = options.find("numa-binding");
  const RawValue* cpu = options.find("cpu-bind");
  if (numa != nullptr && cpu != nullptr) {
    throw ConfigError(fmt::format("{} and {} cannot be used together (one binds by GPU, the "
                                  "other by local rank)", numa->label, cpu->label));
  }
  if (numa != nullptr) {
    const auto mode = parse_choice(numa->text, numa->label,
                                   {"node", "socket", "exclusive", "core-complex"});
    config.binding = mode == "node"        ? Binding::kGpuNode
                     : mode == "socket"    ? Binding::kGpuSocket
                     : mode == "exclusive" ? Binding::kGpuExclusive
                                           : Binding::kGpuCoreComplex;
  }
  if (cpu != nullptr) {
    const auto mode = parse_choice(cpu->text, cpu->label, {"none", "numa", "socket", "core"});
    config.binding = mode == "numa"     ? Binding::kCpuNuma
                     : mode == "socket" ? Binding::kCpuSocket
                     : mode == "core"   ? Binding::kCpuCore
                                        : Binding::kNone;
  }
  // torchrun refuses this only when the workers start; the count is known now.
  if (config.virtual_local_rank) {
    auto visible = env.find("CUDA_VISIBLE_DEVICES");
    if (visible != env.end() && !config.cluster &&
        static_cast<int>(split(visible->second, ',').size()) < config.nproc_per_node) {
      throw ConfigError(fmt::format(
          "{}: CUDA_VISIBLE_DEVICES={} names fewer devices than the {} workers of this node, "
          "and each worker needs one of its own",
          options.label("virtual-local-rank"), visible->second, config.nproc_per_node));
    }
  }
}

// --log-line-prefix (ddprun) and --log-line-prefix-template (torchrun) set the same thing:
// the command line beats the environment, and two from the same source contradict.
void build_log_line_prefix(const OptionReader& options, LaunchConfig& config) {
  const RawValue* ours = options.find("log-line-prefix");
  const RawValue* theirs = options.find("log-line-prefix-template");
  if (ours != nullptr && theirs != nullptr) {
    if (ours->from_command_line == theirs->from_command_line) {
      throw ConfigError(
          fmt::format("{} and {} cannot be used together", ours->label, theirs->label));
    }
    (ours->from_command_line ? theirs : ours) = nullptr;
  }
  if (ours != nullptr) config.log_line_prefix = validate_log_line_prefix(ours->text, ours->label);
  if (theirs != nullptr) {
    config.log_line_prefix = convert_log_line_prefix_template(theirs->text, theirs->label);
  }
}

void build_workers_and_output(const OptionReader& options,
                              const std::map<std::string, std::string>& env,
                              LaunchConfig& config) {
  if (auto* v = options.find("nproc-per-node")) {
    if (config.cluster) {
      config.cluster->nproc_per_node = check_nproc_per_node_text(*v);
    } else {
      config.nproc_per_node = resolve_nproc_per_node(*v, env);
    }
  }
  if (auto* v = options.find("role")) config.role = parse_nonempty(*v);
  if (auto* v = options.find("start-method")) {
    config.start_method = parse_choice(v->text, v->label, {"spawn", "fork", "forkserver"});
  }
  if (auto* v = options.find("monitor-interval")) {
    config.monitor_interval = parse_seconds(v->text, v->label);
  }
  // Whichever of torchrun's event handlers is named, ddprun's events go to --events-file.
  if (auto* v = options.find("event-log-handler")) parse_nonempty(*v);
  if (auto* v = options.find("logs-specs")) {
    throw ConfigError(fmt::format(
        "{}={}: torchrun's logs_specs plug-ins are Python classes, which ddprun does not load; "
        "it writes the logs as torchrun's default does (see --log-dir, --redirects, --tee and "
        "--local-ranks-filter)",
        v->label, v->text));
  }
  if (auto* v = options.find("max-restarts")) {
    config.max_restarts = parse_int_at_least(v->text, v->label, 0);
  }
  if (auto* v = options.find("signals-to-handle")) {
    config.signals_to_handle = parse_signals(v->text, v->label);
  }
  if (auto* v = options.find("shutdown-timeout")) {
    config.shutdown_timeout = parse_seconds(v->text, v->label);
  }
  if (auto* v = options.find("exit-barrier-timeout")) {
    config.exit_barrier_timeout = parse_seconds(v->text, v->label);
  }
  if (auto* v = options.find("node-check")) {
    const auto text = trim(v->text);
    bool known = false;
    for (auto mode : {NodeCheck::kOff, NodeCheck::kWarn, NodeCheck::kRefuse, NodeCheck::kExclude}) {
      if (text == to_string(mode)) {
        config.node_check = mode;
        known = true;
      }
    }
    if (!known) {
      throw ConfigError(
          fmt::format("{}={}: expected off, warn, refuse or exclude", v->label, v->text));
    }
    // The range's minimum is what says how many nodes the job may start without.
    if (config.node_check == NodeCheck::kExclude && config.min_nodes == config.max_nodes) {
      throw ConfigError(fmt::format(
          "{}=exclude: the job has a fixed number of nodes ({}); exclude needs a range, "
          "--nnodes=MIN:MAX, whose minimum says how few the job may start with",
          v->label, config.max_nodes));
    }
  }
  if (auto* v = options.find("node-check-mib")) {
    config.node_check_mib = parse_int_at_least(v->text, v->label, 0);
    if (config.node_check_mib > kMaxNodeCheckMib) {
      throw ConfigError(fmt::format("{}={}: at most {} (MiB each node sends to another)", v->label,
                                    v->text, kMaxNodeCheckMib));
    }
  }
  if (auto* v = options.find("hang-timeout")) {
    config.hang_timeout = parse_seconds(v->text, v->label);
  }
  if (auto* v = options.find("progress-interval")) {
    config.progress_interval = parse_seconds(v->text, v->label);
  }

  if (auto* v = options.find("log-dir")) config.log_dir = std::string(trim(v->text));
  if (auto* v = options.find("redirects")) config.redirects = parse_std_spec(v->text, v->label);
  if (auto* v = options.find("tee")) config.tee = parse_std_spec(v->text, v->label);
  if (auto* v = options.find("local-ranks-filter"); v != nullptr && !trim(v->text).empty()) {
    config.local_ranks_filter = parse_rank_list(v->text, v->label);
  }
  build_log_line_prefix(options, config);
  config.raw_output = options.flag("raw-output");
  build_console_folding(options, config);
  if (config.raw_output && config.hang_timeout.count() > 0 && !writes_output_files(config)) {
    throw ConfigError("--hang-timeout watches the workers' output, which --raw-output sends past "
                      "the agent: use one or the other");
  }
  if (auto* v = options.find("events-file")) config.events_file = std::string(trim(v->text));
  if (auto* v = options.find("metrics-port")) config.metrics_port = parse_port(v->text, v->label);
  if (auto* v = options.find("metrics-addr")) {
    if (config.metrics_port < 0) {
      throw ConfigError(fmt::format("{} needs --metrics-port", v->label));
    }
    config.metrics_addr = parse_ip_address(v->text, v->label);
  }
  if (auto* v = options.find("dry-run")) {
    if (trim(v->text) == "json") {
      config.dry_run = DryRun::kJson;
    } else if (auto on = parse_bool(v->text)) {
      config.dry_run = *on ? DryRun::kTable : DryRun::kOff;
    } else {
      throw ConfigError(fmt::format("{}={}: expected json, or a boolean for the table", v->label,
                                    v->text));
    }
  }
  if (auto* v = options.find("log-level")) {
    config.log_level = parse_choice(v->text, v->label,
                                    {"trace", "debug", "info", "warn", "warning", "error"});
    if (config.log_level == "warning") config.log_level = "warn";
  }
}

// A task of a Slurm step (srun ddprun ...) with the static rendezvous: what the step says fills
// in every rendezvous flag that neither the command line nor PET_* gave.
RawOptions with_slurm_step(const RawOptions& raw, const std::map<std::string, std::string>& env,
                           BuiltConfig& out) {
  if (raw.contains("standalone")) return raw;
  if (auto it = raw.find("rdzv-backend"); it != raw.end() && trim(it->second.text) != "static") {
    return raw;
  }
  if (std::all_of(std::begin(kSlurmStepFlags), std::end(kSlurmStepFlags),
                  [&](std::string_view flag) { return raw.contains(std::string(flag)); })) {
    return raw;
  }
  auto values = slurm_step_values(env);
  if (!values) return raw;
  RawOptions filled = raw;
  std::vector<std::string> taken, given;
  for (const auto& v : *values) {
    if (raw.contains(v.flag)) {
      given.push_back("--" + v.flag);
      continue;
    }
    filled[v.flag] = RawValue{v.value, fmt::format("--{} (from Slurm: {})", v.flag, v.source),
                              false};
    taken.push_back(fmt::format("--{}={} ({})", v.flag, v.value, v.source));
  }
  // (An agent that --hosts=slurm started is given everything: nothing to say.)
  if (!taken.empty()) {
    out.notes.push_back(fmt::format("Slurm step {}.{}: {}{}", env_value(env, "SLURM_JOB_ID"),
                                    env_value(env, "SLURM_STEP_ID"), fmt::join(taken, ", "),
                                    given.empty() ? "" : fmt::format("; given, so kept: {}",
                                                                     fmt::join(given, " "))));
  }
  return filled;
}

}  // namespace

BuiltConfig build_launch_config(const RawOptions& raw_options,
                                const std::vector<std::string>& program_and_args,
                                const std::map<std::string, std::string>& env,
                                const std::vector<std::string>& forward) {
  BuiltConfig out;
  const bool cluster = raw_options.contains("hosts") || raw_options.contains("hostfile");
  if (!cluster) check_no_hosts_flags(raw_options, forward);
  const RawOptions raw = cluster ? build_hosts_config(raw_options, forward, env, out)
                                 : with_slurm_step(raw_options, env, out);
  OptionReader options(raw);
  build_rendezvous(options, out);
  const RawValue* token_file = options.find("token-file");
  out.config.store_secret =
      store::read_secret(token_file ? std::string(trim(token_file->text)) : std::string(),
                         options.label("token-file"), env, out.warnings);
  // Before the workers: a missing program is reported without probing the CUDA driver.
  build_program(options, program_and_args, env, out);
  build_workers_and_output(options, env, out.config);
  build_warm_standby(options, out);
  build_placement(options, env, out.config);
  if (out.config.cluster) {
    auto& c = *out.config.cluster;
    c.program_and_args = program_and_args;
  }
  return out;
}

}  // namespace ddprun
