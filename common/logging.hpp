#pragma once
// Logging setup. Libraries log through spdlog's default logger at debug/info and throw on
// errors; the programs choose the level and the format once, in main().

#include <string>

namespace ddprun {

// Installs a colour-free stderr logger with the pattern "[ddprun <time> <level>] msg".
// `level` is one of trace, debug, info, warn, error, off; unknown names throw ConfigError.
void setup_logging(const std::string& program, const std::string& level);

}  // namespace ddprun
