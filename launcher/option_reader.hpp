#pragma once
// Read access to the raw options (launcher/config_builder.hpp) with the conversions that every
// part of building a LaunchConfig needs: the agent's flags (config_builder.cpp) and the
// --hosts command's (hosts_config.cpp).

#include <string>
#include <string_view>

#include "common/launch_config.hpp"
#include "launcher/config_builder.hpp"

namespace ddprun {

class OptionReader {
 public:
  explicit OptionReader(const RawOptions& raw) : raw_(raw) {}

  // nullptr when the flag was given neither on the command line nor in the environment.
  const RawValue* find(std::string_view key) const;
  // A boolean flag's value (false when absent). Throws ConfigError for a value that is not one.
  bool flag(std::string_view key) const;
  // The label to name a flag by in messages, whether or not it was given.
  std::string label(std::string_view key) const;

 private:
  const RawOptions& raw_;
};

// --rdzv-backend's value; torchrun's other name for etcd ("etcd-v2") is etcd too. Throws
// ConfigError for any other name.
RdzvBackend parse_rdzv_backend(const RawValue& value);
// The value trimmed; throws ConfigError when nothing is left.
std::string parse_nonempty(const RawValue& value);

}  // namespace ddprun
