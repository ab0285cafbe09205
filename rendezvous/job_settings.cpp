#include "rendezvous/job_settings.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/deadline.hpp"
#include "common/error.hpp"

namespace ddprun {

JobSettings agreed_settings(const LaunchConfig& c) {
  return {
      {"--max-restarts", std::to_string(c.max_restarts)},
      {"--hang-timeout", format_duration(c.hang_timeout)},
      {"--rdzv-conf keep_alive_interval", format_duration(c.rdzv_conf.keep_alive_interval)},
      {"--rdzv-conf keep_alive_max_attempt", std::to_string(c.rdzv_conf.keep_alive_max_attempt)},
      // By its file name: ./train.py and /home/me/train.py are one program to the user.
      {"the program", std::filesystem::path(c.program).filename().string()},
  };
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
  for (const auto& [flag, value] : mine) {
    std::string other = "(not set)";
    for (const auto& [their_flag, their_value] : theirs) {
      if (their_flag == flag) other = their_value;
    }
    if (other != value) {
      differences.push_back(
          fmt::format("{} where {} has {}", shown(flag, value), them, shown(flag, other)));
    }
  }
  return fmt::format("{}", fmt::join(differences, "; "));
}

}  // namespace ddprun
