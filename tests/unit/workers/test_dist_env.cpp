// The torchrun environment as ddp_resnet reads it.

#include <catch2/catch.hpp>

#include <map>

#include "common/error.hpp"
#include "workers/dist_env.hpp"

using namespace ddprun::workers;

namespace {

GetEnv env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> torchrun_env() {
  return {{"RANK", "2"},          {"WORLD_SIZE", "3"},           {"LOCAL_RANK", "0"},
          {"LOCAL_WORLD_SIZE", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RESTART_COUNT", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}};
}

}  // namespace

TEST_CASE("dist env: reads what env:// reads", "[workers][env]") {
  DistEnv env = read_dist_env(env_of(torchrun_env()));
  CHECK(env.rank == 2);
  CHECK(env.world_size == 3);
  CHECK(env.local_rank == 0);
  CHECK(env.local_world_size == 1);
  CHECK(env.master_addr == "10.0.0.1");
  CHECK(env.master_port == 29500);
  CHECK(env.restart_count == 1);
  CHECK_FALSE(env.use_agent_store);
  CHECK(env.gloo_socket_ifname.empty());
}

TEST_CASE("dist env: torchrun's agent store and GLOO_SOCKET_IFNAME", "[workers][env]") {
  auto vars = torchrun_env();
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  vars["GLOO_SOCKET_IFNAME"] = "eth1,eth2";
  DistEnv env = read_dist_env(env_of(vars));
  CHECK(env.use_agent_store);
  CHECK(env.gloo_socket_ifname == "eth1");
}

TEST_CASE("dist env: a missing variable is named with a hint to use a launcher", "[workers][env]") {
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"}) {
    auto vars = torchrun_env();
    vars.erase(name);
    INFO(name);
    CHECK_THROWS_AS(read_dist_env(env_of(vars)), ddprun::ConfigError);
    CHECK_THROWS_WITH(read_dist_env(env_of(vars)), Catch::Matchers::Contains(name) && Catch::Matchers::Contains("ddprun"));
  }
}

TEST_CASE("dist env: single process needs no LOCAL_RANK and the rest has defaults", "[workers][env]") {
  DistEnv env = read_dist_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"},
                                      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}}));
  CHECK(env.local_rank == 0);
  CHECK(env.restart_count == 0);
  CHECK(env.local_world_size == 1);
}

TEST_CASE("dist env: values out of range are rejected", "[workers][env]") {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"RANK", "3"}, {"RANK", "-1"}, {"WORLD_SIZE", "0"}, {"MASTER_PORT", "70000"},
      {"MASTER_PORT", "x"}, {"LOCAL_RANK", "9"}, {"TORCHELASTIC_RESTART_COUNT", "-1"}};
  for (const auto& [name, value] : bad) {
    auto vars = torchrun_env();
    vars[name] = value;
    INFO(name << "=" << value);
    CHECK_THROWS_AS(read_dist_env(env_of(vars)), ddprun::ConfigError);
    CHECK_THROWS_WITH(read_dist_env(env_of(vars)), Catch::Matchers::Contains(name + "='" + value + "'"));
  }
}
