#include "agent/worker_launch.hpp"

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <utility>

#include <unistd.h>

#include <fmt/format.h>

#include "agent/worker_env.hpp"
#include "common/strings.hpp"

namespace ddprun {

namespace fs = std::filesystem;

namespace {

bool has(Std streams, Std bit) {
  return (static_cast<int>(streams) & static_cast<int>(bit)) != 0;
}

// Renders a --log-line-prefix template for one worker, in one pass so that a literal "{{rank}}"
// stays text. "{time}" is left for each line, and literal braces stay doubled until then
// (render_time_prefix reads both), the values' own braces doubled with them.
std::string render_prefix(const std::string& tmpl, int rank, int local_rank, int node,
                          const std::string& host, const std::string& role) {
  const std::pair<std::string_view, std::string> values[] = {
      {"{rank}", std::to_string(rank)}, {"{local_rank}", std::to_string(local_rank)},
      {"{node}", std::to_string(node)}, {"{host}", host}, {"{role}", role}};
  std::string out;
  for (std::size_t i = 0; i < tmpl.size();) {
    const char c = tmpl[i];
    if ((c == '{' || c == '}') && i + 1 < tmpl.size() && tmpl[i + 1] == c) {
      out.append(2, c);
      i += 2;
      continue;
    }
    const auto* value = std::find_if(std::begin(values), std::end(values), [&](const auto& v) {
      return tmpl.compare(i, v.first.size(), v.first) == 0;
    });
    if (value == std::end(values)) {
      out += c;
      ++i;
      continue;
    }
    out += double_braces(value->second);
    i += value->first.size();
  }
  return out;
}

// --fold-output for one of the agent's console streams. One rank has nothing to fold with.
FoldMode fold_mode(const LaunchConfig& config, int local_world_size, int fd) {
  if (local_world_size < 2) return FoldMode::kOff;
  return fold_mode_for(config.fold_output, config.raw_output, fd);
}

}  // namespace

AttemptDir::AttemptDir(const std::string& log_dir, int round)
    : path_((fs::path(log_dir) / fmt::format("attempt_{}", round)).string()) {}

std::string AttemptDir::rank_dir(int local_rank) const {
  return (fs::path(path_) / std::to_string(local_rank)).string();
}

std::string AttemptDir::error_file(int local_rank) const {
  return (fs::path(rank_dir(local_rank)) / "error.json").string();
}

std::string AttemptDir::stacks_file(int local_rank) const {
  return (fs::path(rank_dir(local_rank)) / "stacks.txt").string();
}

namespace {

// The launches without touching any file.
std::vector<WorkerLaunch> describe_launches(const LaunchConfig& config, const AgentContext& ctx,
                                            const Round& round, int master_port,
                                            const AttemptDir& dir, const std::string& timer_file,
                                            const OutputHooks& hooks) {
  const auto& r = round.ranks;
  std::vector<WorkerLaunch> launches;
  for (int local = 0; local < r.local_world_size; ++local) {
    const fs::path rank_dir = dir.rank_dir(local);
    WorkerEnvInput in;
    in.ranks = r;
    in.local_rank = local;
    in.role = config.role;
    in.master_addr = round.master_addr;
    in.master_port = master_port;
    in.restart_count = round.restart_count;
    in.max_restarts = config.max_restarts;
    in.run_id = config.rdzv_id;
    in.error_file = dir.error_file(local);
    in.set_omp_threads = r.local_world_size > 1;
    in.timer_file = timer_file;
    in.flight_recorder_prefix = (rank_dir / "nccl_trace_rank_").string();
    in.virtual_local_rank = config.virtual_local_rank;
    in.mpi_env = config.mpi_env;
    in.signals_to_handle = config.signals_to_handle;

    WorkerLaunch w;
    w.local_rank = local;
    w.rank = r.global_rank(local);
    w.argv = substitute_local_rank(config.argv, local);
    w.env = to_env_strings(build_worker_env(ctx.base_env, in));
    if (local < static_cast<int>(ctx.placements.size())) w.placement = ctx.placements[local];
    const auto redirect = config.redirects.for_rank(local);
    const auto tee = config.tee.for_rank(local);
    const bool shown = !config.local_ranks_filter ||
                       std::count(config.local_ranks_filter->begin(),
                                  config.local_ranks_filter->end(), local) > 0;
    auto& o = w.output;
    o.stdout_to_console = shown && (!has(redirect, Std::kOut) || has(tee, Std::kOut));
    o.stderr_to_console = shown && (!has(redirect, Std::kErr) || has(tee, Std::kErr));
    if (has(redirect, Std::kOut) || has(tee, Std::kOut)) {
      o.stdout_file = (rank_dir / "stdout.log").string();
    }
    if (has(redirect, Std::kErr) || has(tee, Std::kErr)) {
      o.stderr_file = (rank_dir / "stderr.log").string();
    }
    o.prefix = render_prefix(config.log_line_prefix, w.rank, local, r.group_rank, ctx.host,
                             config.role);
    o.raw = config.raw_output;
    if (config.console_tags) {
      o.tag_host = ctx.host;  // the command folds
    } else {
      o.fold_stdout = fold_mode(config, r.local_world_size, STDOUT_FILENO);
      o.fold_stderr = fold_mode(config, r.local_world_size, STDERR_FILENO);
    }
    o.on_output = hooks.on_output;
    if (hooks.on_line) o.on_line = hooks.on_line(local);
    launches.push_back(std::move(w));
  }
  return launches;
}

}  // namespace

std::vector<WorkerLaunch> make_worker_launches(const LaunchConfig& config, const AgentContext& ctx,
                                               const Round& round, int master_port,
                                               const AttemptDir& dir,
                                               const std::string& timer_file,
                                               const OutputHooks& hooks) {
  for (int local = 0; local < round.ranks.local_world_size; ++local) {
    fs::create_directories(dir.rank_dir(local));
    // A file left by an earlier run would be read as this worker's error.
    fs::remove(dir.error_file(local));
  }
  auto launches = describe_launches(config, ctx, round, master_port, dir, timer_file, hooks);
  // One copy per stream for the whole attempt, of the lines that reach the console.
  const auto copy = [&](const std::vector<std::string>& filters, const char* name) {
    return filters.empty() ? nullptr
                           : std::make_shared<FilteredCopy>(
                                 (fs::path(dir.path()) / name).string(), filters);
  };
  const auto out = copy(config.duplicate_stdout_filters, "filtered_stdout.log");
  const auto err = copy(config.duplicate_stderr_filters, "filtered_stderr.log");
  for (auto& w : launches) {
    if (w.output.stdout_to_console) w.output.stdout_copy = out;
    if (w.output.stderr_to_console) w.output.stderr_copy = err;
  }
  return launches;
}

std::vector<WorkerLaunch> standby_templates(const LaunchConfig& config, const AgentContext& ctx,
                                            const std::string& timer_file) {
  Round round;
  round.ranks.local_world_size = config.nproc_per_node;
  round.ranks.group_world_size = config.max_nodes;
  round.ranks.world_size = config.nproc_per_node * config.max_nodes;
  return describe_launches(config, ctx, round, 0, AttemptDir(ctx.log_dir, 0), timer_file, {});
}

std::vector<std::string> attempt_variables() {
  return {"RANK", "GROUP_RANK", "ROLE_RANK", "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
          "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE",
          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
          "TORCH_FR_DUMP_TEMP_FILE"};
}

}  // namespace ddprun
