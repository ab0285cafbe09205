#include "common/error.hpp"

#include <cstring>

#include <fmt/format.h>

namespace ddprun {

std::string errno_message(int err) {
  return fmt::format("{} (errno {})", std::strerror(err), err);
}

}  // namespace ddprun
