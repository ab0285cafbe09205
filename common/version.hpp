#pragma once
// ddprun's version: the build's commit (git describe) and the project's release number.

#include <string>

namespace ddprun {

std::string ddprun_version();  // "0.1.0-g<commit>[-dirty]", or a release: cmake/version.cmake

}  // namespace ddprun
