#include "common/logging.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

void setup_logging(const std::string& program, const std::string& level) {
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    throw ConfigError("unknown log level '" + level +
                      "' (expected trace, debug, info, warn, error or off)");
  }
  auto logger = spdlog::stderr_logger_mt(program);
  logger->set_pattern("[" + program + " %H:%M:%S.%e %^%l%$] %v");
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace ddprun
