#pragma once
// The torchrun worker environment, read once: what `init_process_group("env://")` reads, plus
// the restart count and the agent-store switch. Pure (the environment comes in as a function),
// so it is unit-tested without touching the process environment.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ddprun::workers {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  std::uint16_t master_port = 0;
  int restart_count = 0;          // TORCHELASTIC_RESTART_COUNT
  // TORCHELASTIC_USE_AGENT_STORE=True (torchrun): MASTER_ADDR:MASTER_PORT is the agent's store,
  // already running; every rank connects as a client under "/worker/attempt_<restart_count>".
  // Otherwise (ddprun, plain env://) rank 0 hosts the c10d TCPStore there.
  bool use_agent_store = false;
  std::string gloo_socket_ifname;  // GLOO_SOCKET_IFNAME, first entry; empty: default device
};

using GetEnv = std::function<std::optional<std::string>(const std::string& name)>;

// Throws ConfigError naming the variable: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must be
// set (as for env://); LOCAL_RANK defaults to RANK's value only when WORLD_SIZE is 1, else is
// required too; numbers are checked for range (0 <= RANK < WORLD_SIZE, port 1..65535).
DistEnv read_dist_env(const GetEnv& getenv);

// The real process environment.
GetEnv process_env();

// This machine's host name, for error messages.
std::string host_name();

}  // namespace ddprun::workers
