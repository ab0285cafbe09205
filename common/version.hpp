#pragma once
// ddprun's version, from the project's CMake version.

#include <string>

namespace ddprun {

std::string ddprun_version();  // "0.1.0"

}  // namespace ddprun
