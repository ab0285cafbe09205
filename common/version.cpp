#include "common/version.hpp"

#include "ddprun_version.h"  // generated: cmake/version.cmake

namespace ddprun {

std::string ddprun_version() { return DDPRUN_VERSION; }

}  // namespace ddprun
