#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun {

std::string Round::host_of(int group_rank) const {
  if (group_rank < 0 || group_rank >= static_cast<int>(hosts.size())) return "?";
  const auto& host = hosts[static_cast<std::size_t>(group_rank)];
  return host.empty() ? "?" : host;
}

}  // namespace ddprun
