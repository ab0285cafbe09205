#include "launcher/option_reader.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "launcher/value_parsers.hpp"

namespace ddprun {

const RawValue* OptionReader::find(std::string_view key) const {
  auto it = raw_.find(key);
  return it == raw_.end() ? nullptr : &it->second;
}

bool OptionReader::flag(std::string_view key) const {
  const RawValue* value = find(key);
  if (value == nullptr) return false;
  auto parsed = parse_bool(value->text);
  if (!parsed) {
    throw ConfigError(fmt::format("{}={}: expected a boolean (1/0, true/false)", value->label,
                                  value->text));
  }
  return *parsed;
}

std::string OptionReader::label(std::string_view key) const {
  const RawValue* value = find(key);
  return value != nullptr ? value->label : fmt::format("--{}", key);
}

RdzvBackend parse_rdzv_backend(const RawValue& value) {
  auto name = std::string(trim(value.text));
  if (name == "etcd-v2") name = "etcd";
  name = parse_choice(name, value.label, {"static", "c10d", "etcd"});
  if (name == "c10d") return RdzvBackend::kC10d;
  if (name == "etcd") return RdzvBackend::kEtcd;
  return RdzvBackend::kStatic;
}

std::string parse_nonempty(const RawValue& value) {
  std::string text(trim(value.text));
  if (text.empty()) throw ConfigError(fmt::format("{} must not be empty", value.label));
  return text;
}

}  // namespace ddprun
