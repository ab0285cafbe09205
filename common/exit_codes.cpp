#include "common/exit_codes.hpp"

#include "common/error.hpp"

namespace ddprun {

ErrorClass classify(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e) != nullptr) return ErrorClass::kUsage;
  if (dynamic_cast<const TimeoutError*>(&e) != nullptr ||
      dynamic_cast<const ConnectionError*>(&e) != nullptr ||
      dynamic_cast<const RendezvousError*>(&e) != nullptr) {
    return ErrorClass::kRendezvous;
  }
  return ErrorClass::kInternal;
}

int exit_code_for(ErrorClass c) {
  switch (c) {
    case ErrorClass::kUsage:
      return kExitUsage;
    case ErrorClass::kRendezvous:
      return kExitRendezvous;
    case ErrorClass::kInternal:
      return kExitInternal;
  }
  return kExitInternal;
}

}  // namespace ddprun
