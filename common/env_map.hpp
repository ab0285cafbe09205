#pragma once
// A process environment as a sorted map: the agent's own, read once at start, and each
// worker's, built from it.

#include <map>
#include <string>
#include <vector>

namespace ddprun {

using EnvMap = std::map<std::string, std::string>;

// The current process's environment.
EnvMap current_environment();

// `key`'s value in `env`, empty when it is not set.
std::string env_value(const EnvMap& env, const std::string& key);

// "KEY=VALUE" strings, for exec.
std::vector<std::string> to_env_strings(const EnvMap& env);

}  // namespace ddprun
