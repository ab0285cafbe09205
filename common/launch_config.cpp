#include "common/launch_config.hpp"

namespace ddprun {

const char* to_string(RdzvBackend backend) {
  switch (backend) {
    case RdzvBackend::kStatic:
      return "static";
    case RdzvBackend::kC10d:
      return "c10d";
    case RdzvBackend::kEtcd:
      return "etcd";
  }
  return "?";
}

Std StdSpec::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? Std::kNone : it->second;
}

}  // namespace ddprun
