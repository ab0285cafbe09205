#include "common/launch_config.hpp"

namespace ddprun {

Std StdSpec::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? Std::kNone : it->second;
}

}  // namespace ddprun
