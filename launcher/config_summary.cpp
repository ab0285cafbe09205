#include "launcher/config_summary.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/strings.hpp"
#include "common/version.hpp"

namespace ddprun {
namespace {

std::string seconds_text(std::chrono::milliseconds duration) {
  return fmt::format("{:g}s", static_cast<double>(duration.count()) / 1000.0);
}

bool any_stream(const StdSpec& spec) {
  if (spec.per_rank.empty()) return spec.all != Std::kNone;
  return std::any_of(spec.per_rank.begin(), spec.per_rank.end(),
                     [](const auto& entry) { return entry.second != Std::kNone; });
}

std::string log_dir_text(const LaunchConfig& config) {
  if (!config.log_dir.empty()) return config.log_dir;
  if (writes_log_files(config)) return "(a new temp dir)";
  return "(console only)";
}

}  // namespace

bool writes_output_files(const LaunchConfig& config) {
  return any_stream(config.redirects) || any_stream(config.tee) ||
         !config.duplicate_stdout_filters.empty() || !config.duplicate_stderr_filters.empty();
}

bool writes_log_files(const LaunchConfig& config) {
  return writes_output_files(config) || config.hang_timeout.count() > 0;
}

std::string describe(const LaunchConfig& config) {
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("nodes", config.min_nodes == config.max_nodes
                                 ? fmt::format("{}", config.max_nodes)
                                 : fmt::format("{}:{}", config.min_nodes, config.max_nodes));
  rows.emplace_back("nproc per node", fmt::format("{}", config.nproc_per_node));
  if (config.is_static()) {
    rows.emplace_back("rendezvous",
                      fmt::format("static{}, master {}, run id {}",
                                  config.standalone ? " (standalone)" : "",
                                  config.master_port == 0
                                      ? config.master_addr + " (a free port)"
                                      : format_host_port(config.master_addr, config.master_port),
                                  config.rdzv_id));
    rows.emplace_back("node rank", fmt::format("{}", config.node_rank));
  } else {
    rows.emplace_back("rendezvous", fmt::format("{}, endpoint {}, run id {}",
                                                to_string(config.rdzv_backend), config.rdzv_endpoint,
                                                config.rdzv_id));
  }
  rows.emplace_back("max restarts", fmt::format("{}", config.max_restarts));
  rows.emplace_back("shutdown timeout", seconds_text(config.shutdown_timeout));
  if (config.hang_timeout.count() > 0) {
    rows.emplace_back("hang timeout", seconds_text(config.hang_timeout));
  }
  if (config.binding != Binding::kNone) rows.emplace_back("placement", to_string(config.binding));
  if (config.virtual_local_rank) {
    rows.emplace_back("local rank", "virtual: LOCAL_RANK=0, one GPU in CUDA_VISIBLE_DEVICES");
  }
  if (config.mpi_env) rows.emplace_back("MPI variables", "OMPI_COMM_WORLD_* for every worker");
  if (config.metrics_port >= 0) {
    rows.emplace_back("metrics", fmt::format("http://{}/metrics{}",
                                             format_host_port(config.metrics_addr,
                                                              static_cast<std::uint16_t>(config.metrics_port)),
                                             config.metrics_port == 0 ? " (port picked at start)" : ""));
  }
  rows.emplace_back("log dir", log_dir_text(config));
  rows.emplace_back("program", shell_join(config.argv));
  rows.emplace_back("version", ddprun_version());

  std::size_t width = 0;
  for (const auto& row : rows) width = std::max(width, row.first.size());
  std::string out;
  for (const auto& [key, value] : rows) {
    if (!out.empty()) out += '\n';
    out += fmt::format("{:<{}}  {}", key, width, value);
  }
  return out;
}

}  // namespace ddprun
