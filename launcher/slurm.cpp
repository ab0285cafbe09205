#include "launcher/slurm.hpp"

#include <fmt/format.h>

#include "agent/worker_env.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun {

namespace {

[[noreturn]] void bad(std::string_view what, std::string_view text, std::string_view why) {
  throw ConfigError(fmt::format("{}={}: {}", what, text, why));
}

// The numbers of one bracket group ("01-04,07"), as text with the padding they ask for.
std::vector<std::string> expand_ranges(std::string_view ranges, std::string_view what,
                                       std::string_view text) {
  std::vector<std::string> out;
  for (const auto& part : split(ranges, ',')) {
    const auto dash = part.find('-');
    const std::string lo_text = part.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : part.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() <= 18 &&
             s.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(lo_text) || !digits(hi_text)) {
      bad(what, text, fmt::format("'{}' is not a number or a range N-M", part));
    }
    const auto lo = std::stoll(lo_text);
    const auto hi = std::stoll(hi_text);
    if (hi < lo) bad(what, text, fmt::format("range '{}' runs backwards", part));
    if (hi - lo >= 1'000'000) bad(what, text, fmt::format("range '{}' is too large", part));
    const auto width = lo_text.size();
    for (auto i = lo; i <= hi; ++i) out.push_back(fmt::format("{:0{}}", i, width));
  }
  return out;
}

// One name with any number of bracket groups: their cartesian product, the first group
// varying slowest.
std::vector<std::string> expand_name(std::string_view name, std::string_view what,
                                     std::string_view text) {
  std::vector<std::string> names{""};
  std::size_t at = 0;
  while (at < name.size()) {
    const auto open = name.find('[', at);
    const auto literal = name.substr(at, open == std::string_view::npos ? name.npos : open - at);
    if (literal.find(']') != std::string_view::npos) bad(what, text, "']' without '['");
    if (at > 0 && open == std::string_view::npos && !literal.empty()) {
      // As Slurm's own parser: a name may not go on after its last bracket group.
      bad(what, text, fmt::format("'{}' follows the last bracket group", literal));
    }
    for (auto& n : names) n += literal;
    if (open == std::string_view::npos) break;
    const auto close = name.find(']', open);
    if (close == std::string_view::npos) bad(what, text, "'[' without ']'");
    const auto inner = name.substr(open + 1, close - open - 1);
    if (inner.empty() || inner.find('[') != std::string_view::npos) {
      bad(what, text, fmt::format("bad bracket group '[{}]'", inner));
    }
    const auto numbers = expand_ranges(inner, what, text);
    std::vector<std::string> next;
    next.reserve(names.size() * numbers.size());
    for (const auto& n : names) {
      for (const auto& number : numbers) next.push_back(n + number);
    }
    names = std::move(next);
    at = close + 1;
  }
  return names;
}

// "2(x3),1" -> 2 2 2 1: Slurm's compressed per-node counts.
std::vector<long long> expand_counts(const std::string& text) {
  std::vector<long long> out;
  for (const auto& part : split(text, ',')) {
    const auto paren = part.find("(x");
    const auto count = parse_int(part.substr(0, paren));
    long long times = 1;
    if (paren != std::string::npos && part.back() == ')') {
      times = parse_int(part.substr(paren + 2, part.size() - paren - 3)).value_or(1);
    }
    if (count) out.insert(out.end(), static_cast<std::size_t>(std::max(1LL, times)), *count);
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what) {
  std::vector<std::string> hosts;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) bad(what, text, "unbalanced brackets");
    if (c == ',' && depth == 0) {
      const auto name = text.substr(start, i - start);
      if (name.empty()) bad(what, text, "an empty host name");
      if (name.find_first_of(" \t\n") != std::string_view::npos) {
        bad(what, text, "a host name with white space");
      }
      for (auto& h : expand_name(name, what, text)) hosts.push_back(std::move(h));
      start = i + 1;
    }
  }
  if (depth != 0) bad(what, text, "unbalanced brackets");
  return hosts;
}

int slurm_port(long long job_id) { return 20000 + static_cast<int>(job_id % 10000); }

std::optional<std::vector<SlurmValue>> slurm_step_values(
    const std::map<std::string, std::string>& env) {
  const auto job = env_value(env, "SLURM_JOB_ID");
  const auto step = env_value(env, "SLURM_STEP_ID");
  if (job.empty() || step.empty()) return std::nullopt;

  const auto tasks = env_value(env, "SLURM_STEP_TASKS_PER_NODE");
  for (auto count : expand_counts(tasks)) {
    if (count > 1) {
      throw ConfigError(fmt::format(
          "this Slurm step runs {} tasks on a node (SLURM_STEP_TASKS_PER_NODE={}): ddprun is one "
          "agent per node that starts the node's workers itself; run it as "
          "`srun --ntasks-per-node=1 ddprun ...` (and give the workers with --nproc-per-node)",
          count, tasks));
    }
  }
  const std::string list_var =
      env.count("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_NODELIST";
  const auto list = env_value(env, list_var);
  const auto nodes = expand_hostlist(list, list_var);
  const std::string count_var =
      env.count("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  const auto job_id = parse_int(job);
  if (nodes.empty() || !job_id) {
    throw ConfigError(fmt::format("the Slurm environment is incomplete ({}='{}', SLURM_JOB_ID='{}')",
                                  list_var, list, job));
  }

  std::vector<SlurmValue> values;
  const auto count = env_value(env, count_var);
  values.push_back({"nnodes", count.empty() ? std::to_string(nodes.size()) : count, count_var});
  values.push_back({"node-rank", env_value(env, "SLURM_NODEID"), "SLURM_NODEID"});
  values.push_back({"master-addr", nodes.front(), fmt::format("first of {}={}", list_var, list)});
  values.push_back({"master-port", std::to_string(slurm_port(*job_id)),
                    fmt::format("derived from SLURM_JOB_ID={}", job)});
  values.push_back({"rdzv-id", fmt::format("slurm-{}.{}", job, step),
                    "SLURM_JOB_ID.SLURM_STEP_ID"});
  const auto gpus = parse_int(env_value(env, "SLURM_GPUS_ON_NODE"));
  if (gpus && *gpus > 0) {
    values.push_back({"nproc-per-node", std::to_string(*gpus), "SLURM_GPUS_ON_NODE"});
  } else {
    values.push_back({"nproc-per-node", "auto", "no SLURM_GPUS_ON_NODE: GPUs, else CPUs"});
  }
  return values;
}

std::vector<std::string> slurm_allocation_hosts(const std::map<std::string, std::string>& env,
                                                std::string_view label) {
  const auto list = env_value(env, "SLURM_JOB_NODELIST");
  if (env_value(env, "SLURM_JOB_ID").empty() || list.empty()) {
    throw ConfigError(fmt::format(
        "{}=slurm: not inside a Slurm allocation (no SLURM_JOB_ID/SLURM_JOB_NODELIST); run it in "
        "an sbatch script or an salloc shell",
        label));
  }
  return expand_hostlist(list, "SLURM_JOB_NODELIST");
}

}  // namespace ddprun
