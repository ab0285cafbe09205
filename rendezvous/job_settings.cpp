#include "rendezvous/job_settings.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun {

namespace {

// A Python script's bytes, as its size and a 64-bit digest: copies of one script at different
// paths agree, two scripts of one name in different directories do not. std::hash is the same
// function in every node's ddprun of one version (libstdc++ is linked in), and needs no
// libcrypto, which a job without a secret never loads. A native program is not read: it may be
// built on each node; nor is a module (-m), which is no one file.
std::string script_digest(const LaunchConfig& c) {
  if (c.no_python || c.module) return "-";
  std::error_code ec;
  const auto size = std::filesystem::file_size(c.program, ec);
  std::ifstream in(c.program, std::ios::binary);
  if (ec || !in) return "unreadable here";
  if (size > (64 << 20)) return fmt::format("{} bytes", size);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  return fmt::format("{} bytes, digest {:016x}", bytes.size(),
                     std::hash<std::string_view>{}(bytes));
}

// The mode, and when it runs, the version of its protocol: in the value a ddprun of any version
// compares, so that two versions are told apart whichever node came first.
std::string node_check_setting(NodeCheck mode) {
  return mode == NodeCheck::kOff
             ? to_string(mode)
             : fmt::format("{} (check version {})", to_string(mode), kNodeCheckProtocol);
}

std::string quoted(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& a : args) out.push_back(shell_quote(a));
  return args.empty() ? "(none)" : fmt::format("{}", fmt::join(out, " "));
}

}  // namespace

JobSettings agreed_settings(const LaunchConfig& c) {
  JobSettings settings{
      {"the rendezvous' records",
       fmt::format("version {} (another ddprun version writes them otherwise)",
                   kRendezvousRecords)},
      {"--max-restarts", std::to_string(c.max_restarts)},
      {"--hang-timeout", format_duration(c.hang_timeout)},
      {"--node-check", node_check_setting(c.node_check)},
      {"--node-check-mib", std::to_string(c.node_check_mib)},
      {"--rdzv-conf keep_alive_interval", format_duration(c.rdzv_conf.keep_alive_interval)},
      {"--rdzv-conf keep_alive_max_attempt", std::to_string(c.rdzv_conf.keep_alive_max_attempt)},
      // By its file name: ./train.py and /home/me/train.py are one program to the user; its
      // content tells two jobs that share an endpoint and id by mistake.
      {"the program", std::filesystem::path(c.program).filename().string()},
      {"the script", script_digest(c)},
  };
  // An elastic job's nodes are interchangeable, so their command lines are one; a static
  // node may be told its own part (--node_rank=$SLURM_NODEID), and two static jobs cannot
  // share a master port anyway.
  if (!c.is_static()) settings.emplace_back("the program's arguments", quoted(c.program_args));
  return settings;
}

std::string encode_settings(const JobSettings& settings) {
  return nlohmann::json(settings).dump();
}

JobSettings decode_settings(const std::string& text) {
  try {
    return nlohmann::json::parse(text).get<JobSettings>();
  } catch (const nlohmann::json::exception& e) {
    throw RendezvousError(fmt::format("malformed job settings '{}' in the store: {}", text,
                                      e.what()));
  }
}

std::string describe_difference(const JobSettings& mine, const JobSettings& theirs,
                                const std::string& them) {
  std::vector<std::string> differences;
  const auto shown = [](const std::string& flag, const std::string& value) {
    return flag.starts_with("--") ? fmt::format("{}={}", flag, value)
                                  : fmt::format("{} {}", flag, value);
  };
  const auto value_in = [](const JobSettings& settings,
                           const std::string& flag) -> std::optional<std::string> {
    for (const auto& [f, value] : settings) {
      if (f == flag) return value;
    }
    return std::nullopt;
  };
  const std::string unset = "(not set)";
  for (const auto& [flag, value] : mine) {
    const auto other = value_in(theirs, flag).value_or(unset);
    if (other != value) {
      differences.push_back(
          fmt::format("{} where {} has {}", shown(flag, value), them, shown(flag, other)));
    }
  }
  // A setting only theirs has (a ddprun of another version compares more).
  for (const auto& [flag, value] : theirs) {
    if (!value_in(mine, flag)) {
      differences.push_back(
          fmt::format("{} where {} has {}", shown(flag, unset), them, shown(flag, value)));
    }
  }
  return fmt::format("{}", fmt::join(differences, "; "));
}

}  // namespace ddprun
