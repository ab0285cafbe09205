#include "workers/dist_env.hpp"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun::workers {
namespace {

constexpr const char* kLaunchHint =
    " (start ddp_resnet with ddprun or torchrun, e.g. "
    "`ddprun --nproc-per-node=2 --no-python ddp_resnet --backend gloo --use_syn`)";

std::string require(const GetEnv& getenv, const std::string& name) {
  auto value = getenv(name);
  if (!value || value->empty()) {
    throw ConfigError(fmt::format("environment variable {} is not set{}", name, kLaunchHint));
  }
  return *value;
}

std::int64_t to_int(const std::string& name, const std::string& text, std::int64_t lo,
                    std::int64_t hi) {
  auto v = parse_int(text);
  if (!v || *v < lo || *v > hi) {
    throw ConfigError(fmt::format("environment variable {}='{}': expected an integer in {}..{}",
                                  name, text, lo, hi));
  }
  return *v;
}

}  // namespace

DistEnv read_dist_env(const GetEnv& getenv) {
  DistEnv env;
  env.world_size = static_cast<int>(to_int("WORLD_SIZE", require(getenv, "WORLD_SIZE"), 1, 1 << 20));
  env.rank = static_cast<int>(to_int("RANK", require(getenv, "RANK"), 0, env.world_size - 1));
  env.master_addr = require(getenv, "MASTER_ADDR");
  env.master_port =
      static_cast<std::uint16_t>(to_int("MASTER_PORT", require(getenv, "MASTER_PORT"), 1, 65535));

  auto local_rank = getenv("LOCAL_RANK");
  if (local_rank && !local_rank->empty()) {
    env.local_rank = static_cast<int>(to_int("LOCAL_RANK", *local_rank, 0, env.world_size - 1));
  } else if (env.world_size == 1) {
    env.local_rank = 0;
  } else {
    throw ConfigError(fmt::format("environment variable LOCAL_RANK is not set{}", kLaunchHint));
  }
  auto local_world = getenv("LOCAL_WORLD_SIZE");
  env.local_world_size =
      local_world && !local_world->empty()
          ? static_cast<int>(to_int("LOCAL_WORLD_SIZE", *local_world, 1, env.world_size))
          : env.world_size;
  auto restarts = getenv("TORCHELASTIC_RESTART_COUNT");
  env.restart_count = restarts && !restarts->empty()
                          ? static_cast<int>(to_int("TORCHELASTIC_RESTART_COUNT", *restarts, 0,
                                                    1 << 30))
                          : 0;
  auto agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.use_agent_store = agent_store && parse_bool(*agent_store).value_or(false);
  if (auto ifname = getenv("GLOO_SOCKET_IFNAME"); ifname && !ifname->empty()) {
    env.gloo_socket_ifname = split(*ifname, ',').front();
  }
  return env;
}

GetEnv process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string host_name() {
  char name[256] = "";
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace ddprun::workers
