#include "common/version.hpp"

namespace ddprun {

std::string ddprun_version() { return DDPRUN_VERSION; }

}  // namespace ddprun
