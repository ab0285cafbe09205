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

const char* to_string(Binding binding) {
  switch (binding) {
    case Binding::kNone:
      return "none";
    case Binding::kGpuNode:
      return "--numa-binding=node";
    case Binding::kGpuSocket:
      return "--numa-binding=socket";
    case Binding::kGpuExclusive:
      return "--numa-binding=exclusive";
    case Binding::kGpuCoreComplex:
      return "--numa-binding=core-complex";
    case Binding::kCpuNuma:
      return "--cpu-bind=numa";
    case Binding::kCpuSocket:
      return "--cpu-bind=socket";
    case Binding::kCpuCore:
      return "--cpu-bind=core";
  }
  return "?";
}

const char* to_string(NodeCheck mode) {
  switch (mode) {
    case NodeCheck::kOff:
      return "off";
    case NodeCheck::kWarn:
      return "warn";
    case NodeCheck::kRefuse:
      return "refuse";
    case NodeCheck::kExclude:
      return "exclude";
  }
  return "?";
}

Std StdSpec::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? Std::kNone : it->second;
}

}  // namespace ddprun
