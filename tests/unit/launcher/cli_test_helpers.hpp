#pragma once
// Shared helpers for the launcher's CLI tests: run the parser on an argv/env pair and check
// either the resulting config or the usage error.

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "launcher/cli.hpp"

namespace ddprun::test {

using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

// Parses and requires a config; the message is shown if it fails.
inline LaunchConfig parse_ok(const Args& args, const Env& env = {}) {
  CliOutcome outcome = parse_command_line(args, env);
  INFO("args: " << Catch::Detail::stringify(args) << "\nmessage: " << outcome.message);
  REQUIRE(outcome.config.has_value());
  CHECK(outcome.exit_code == 0);
  return *outcome.config;
}

// Parses and requires a one-line usage error (exit 2, no config) containing every needle.
inline void expect_usage_error(const Args& args, const std::vector<std::string>& needles,
                               const Env& env = {}) {
  CliOutcome outcome = parse_command_line(args, env);
  INFO("args: " << Catch::Detail::stringify(args) << "\nmessage: " << outcome.message);
  CHECK_FALSE(outcome.config.has_value());
  CHECK(outcome.exit_code == 2);
  CHECK_THAT(outcome.message, Catch::StartsWith("ddprun: "));
  CHECK(outcome.message.find('\n') == std::string::npos);
  for (const auto& needle : needles) CHECK_THAT(outcome.message, Catch::Contains(needle));
  // The user's language: no names of the libraries or types inside ddprun.
  for (const char* internal : {"CLI11", "CLI::", "std::", "boost", "nlohmann", "what()",
                               "default_launcher", "[system:", "basic_string"}) {
    CHECK_THAT(outcome.message, !Catch::Contains(internal, Catch::CaseSensitive::No));
  }
}

}  // namespace ddprun::test
