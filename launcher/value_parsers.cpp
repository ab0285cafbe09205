#include "launcher/value_parsers.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "common/python_template.hpp"
#include "common/random.hpp"
#include "common/strings.hpp"

namespace ddprun {
namespace {

[[noreturn]] void fail(std::string_view label, std::string_view text, std::string_view why) {
  throw ConfigError(fmt::format("{}={}: {}", label, text, why));
}

// Parses one "0".."3" stream selector; nullopt when the text is anything else.
std::optional<Std> parse_std(std::string_view text) {
  auto value = parse_int(text);
  if (!value || *value < 0 || *value > 3) return std::nullopt;
  return static_cast<Std>(*value);
}

// Signals no agent can forward, and why: uncatchable, the agent's own (SIGCHLD, news of its
// workers; SIGPIPE, which it ignores so that a closed console cannot end it), or the report of
// a fault in the agent itself, which must end it.
constexpr std::string_view kUncatchable = "no process can catch it";
constexpr std::string_view kAgentsOwn = "the agent needs it for itself";
constexpr std::string_view kAgentFault = "it reports a fault of the agent";
constexpr std::pair<int, std::string_view> kUnforwardable[] = {
    {SIGKILL, kUncatchable}, {SIGSTOP, kUncatchable}, {SIGCHLD, kAgentsOwn},
    {SIGPIPE, kAgentsOwn},   {SIGSEGV, kAgentFault},  {SIGBUS, kAgentFault},
    {SIGFPE, kAgentFault},   {SIGILL, kAgentFault},   {SIGTRAP, kAgentFault},
    {SIGSYS, kAgentFault}};
// Python's other names for some of them, which glibc may not give.
constexpr std::pair<std::string_view, int> kSignalAliases[] = {
    {"IOT", SIGABRT}, {"CLD", SIGCHLD}, {"POLL", SIGIO}, {"IO", SIGIO}};

constexpr std::string_view kPrefixPlaceholders[] = {"rank", "local_rank", "node",
                                                    "host", "role",       "time"};

}  // namespace

std::pair<int, int> parse_nnodes(std::string_view text, std::string_view label) {
  auto parts = split(text, ':');
  if (parts.size() > 2) fail(label, text, "expected N or MIN:MAX");
  auto parse_count = [&](const std::string& part, std::string_view which) {
    auto value = parse_int(part);
    if (!value) fail(label, text, fmt::format("{} must be an integer", which));
    if (*value <= 0) fail(label, text, fmt::format("{} must be >= 1", which));
    if (*value > INT_MAX) fail(label, text, fmt::format("{} is too large", which));
    return static_cast<int>(*value);
  };
  if (parts.size() == 1) {
    int n = parse_count(parts[0], "the number of nodes");
    return {n, n};
  }
  int min_nodes = parse_count(parts[0], "MIN");
  int max_nodes = parse_count(parts[1], "MAX");
  if (min_nodes > max_nodes) fail(label, text, "MIN must be <= MAX");
  return {min_nodes, max_nodes};
}

int parse_int_at_least(std::string_view text, std::string_view label, int min_value) {
  auto value = parse_int(text);
  if (!value) fail(label, text, "expected an integer");
  if (*value < min_value) fail(label, text, fmt::format("must be >= {}", min_value));
  if (*value > INT_MAX) fail(label, text, "too large");
  return static_cast<int>(*value);
}

std::string parse_ip_address(std::string_view text, std::string_view label) {
  std::string address(trim(text));
  if (address.size() > 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  in6_addr scratch{};
  if (inet_pton(AF_INET, address.c_str(), &scratch) != 1 &&
      inet_pton(AF_INET6, address.c_str(), &scratch) != 1) {
    fail(label, text, "expected an IP address such as 127.0.0.1, 0.0.0.0 or ::1");
  }
  return address;
}

std::uint16_t parse_port(std::string_view text, std::string_view label) {
  auto value = parse_int(text);
  if (!value || *value < 0 || *value > 65535) {
    fail(label, text, "a port must be an integer in 0..65535");
  }
  return static_cast<std::uint16_t>(*value);
}

std::chrono::milliseconds parse_seconds(std::string_view text, std::string_view label,
                                        bool allow_zero) {
  auto value = parse_double(text);
  // from_chars accepts "inf" and "nan"; neither is a usable timeout.
  if (!value || !std::isfinite(*value)) fail(label, text, "expected a number of seconds");
  if (*value < 0 || (!allow_zero && *value == 0)) {
    fail(label, text, allow_zero ? "must be >= 0 seconds" : "must be > 0 seconds");
  }
  double ms = std::round(*value * 1000.0);
  if (ms > 1e15) fail(label, text, "too large");
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

StdSpec parse_std_spec(std::string_view text, std::string_view label) {
  StdSpec spec;
  auto trimmed = trim(text);
  if (auto all = parse_std(trimmed)) {
    spec.all = *all;
    return spec;
  }
  constexpr std::string_view kExpected = "expected 0..3 or a map like 0:1,1:2";
  if (trimmed.find(':') == std::string_view::npos) fail(label, text, kExpected);
  for (const auto& item : split(trimmed, ',')) {
    auto pair = split(item, ':');
    if (pair.size() != 2) fail(label, text, kExpected);
    auto rank = parse_int(pair[0]);
    if (!rank || *rank < 0 || *rank > INT_MAX) {
      fail(label, text, fmt::format("'{}' is not a local rank (an integer >= 0)", trim(pair[0])));
    }
    auto value = parse_std(pair[1]);
    if (!value) {
      fail(label, text, fmt::format("'{}' for local rank {} is not 0..3", trim(pair[1]), *rank));
    }
    if (!spec.per_rank.emplace(static_cast<int>(*rank), *value).second) {
      fail(label, text, fmt::format("local rank {} is given twice", *rank));
    }
  }
  return spec;
}

RdzvConf parse_rdzv_conf(std::string_view text, std::string_view label,
                         std::vector<std::string>* unknown_keys) {
  RdzvConf conf;
  std::optional<std::chrono::milliseconds> join_timeout;
  std::optional<std::chrono::milliseconds> timeout_alias;
  // Job templates and YAML often keep the shell's quotes inside the value
  // (--rdzv-conf='timeout=5,...' reaching us with its quotes); torchrun runs such a line.
  std::string_view body = trim(text);
  if (body.size() >= 2 && (body.front() == '\'' || body.front() == '"') &&
      body.back() == body.front()) {
    body = body.substr(1, body.size() - 2);
  }
  for (const auto& raw_item : split(body, ',')) {
    auto item = trim(raw_item);
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      fail(label, text, fmt::format("'{}' is not key=value", item));
    }
    std::string key(trim(item.substr(0, eq)));
    std::string value(trim(item.substr(eq + 1)));
    if (key.empty()) fail(label, text, fmt::format("'{}' has an empty key", item));
    // Sub-errors name the key, e.g. "--rdzv-conf join_timeout=abc: expected ...".
    std::string key_label = fmt::format("{} {}", label, key);
    if (key == "join_timeout") {
      join_timeout = parse_seconds(value, key_label, false);
    } else if (key == "timeout") {
      timeout_alias = parse_seconds(value, key_label, false);
    } else if (key == "last_call_timeout") {
      conf.last_call_timeout = parse_seconds(value, key_label);
    } else if (key == "close_timeout") {
      conf.close_timeout = parse_seconds(value, key_label);
    } else if (key == "keep_alive_interval") {
      conf.keep_alive_interval = parse_seconds(value, key_label, false);
    } else if (key == "keep_alive_max_attempt") {
      conf.keep_alive_max_attempt = parse_int_at_least(value, key_label, 1);
    } else if (key == "read_timeout") {
      conf.read_timeout = parse_seconds(value, key_label, false);
    } else if (key == "is_host") {
      auto flag = parse_bool(value);
      if (!flag) fail(key_label, value, "expected a boolean (true/false, 1/0)");
      conf.is_host = *flag;
    } else if (key == "etcd_prefix") {
      if (value.empty() || value.front() != '/') fail(key_label, value, "expected a key prefix starting with /");
      conf.etcd_prefix = value;
    } else if (key == "protocol") {
      if (value != "http") {
        fail(key_label, value, "only http is supported (ddprun speaks plain HTTP to etcd)");
      }
    } else {
      if (unknown_keys) unknown_keys->push_back(key);
    }
  }
  if (join_timeout) {
    conf.join_timeout = *join_timeout;
  } else if (timeout_alias) {
    conf.join_timeout = *timeout_alias;
  }
  return conf;
}

std::vector<int> parse_signals(std::string_view text, std::string_view label) {
  std::vector<int> numbers;
  for (const auto& raw_item : split(text, ',')) {
    std::string name(trim(raw_item));
    if (name.empty()) fail(label, text, "empty signal name");
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (name.starts_with("SIG")) name.erase(0, 3);
    // Any name of Python's signal module that names a standard signal, as torchrun takes it.
    int number = 0;
    for (int s = 1; s < SIGRTMIN && number == 0; ++s) {
      const char* abbrev = sigabbrev_np(s);
      if (abbrev != nullptr && name == abbrev) number = s;
    }
    for (const auto& [alias, signo] : kSignalAliases) {
      if (number == 0 && name == alias) number = signo;
    }
    if (number == 0) {
      fail(label, text, fmt::format("unknown signal '{}' (expected a name such as SIGTERM, "
                                    "SIGUSR1 or SIGXCPU)",
                                    trim(raw_item)));
    }
    for (const auto& [signo, why] : kUnforwardable) {
      if (signo == number) {
        fail(label, text, fmt::format("{} cannot be forwarded: {}", signal_name(number), why));
      }
    }
    if (std::find(numbers.begin(), numbers.end(), number) == numbers.end()) {
      numbers.push_back(number);
    }
  }
  return numbers;
}

std::vector<int> parse_rank_list(std::string_view text, std::string_view label) {
  std::set<int> ranks;
  for (const auto& item : split(text, ',')) {
    auto rank = parse_int(item);
    if (!rank || *rank < 0 || *rank > INT_MAX) {
      fail(label, text, fmt::format("'{}' is not a local rank (an integer >= 0)", trim(item)));
    }
    ranks.insert(static_cast<int>(*rank));
  }
  return {ranks.begin(), ranks.end()};
}

std::vector<std::string> parse_filter_list(std::string_view text) {
  std::vector<std::string> out;
  std::string item;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') {
      item += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else {
      if (!item.empty()) out.push_back(std::move(item));
      item.clear();
    }
  }
  return out;
}

std::string parse_choice(std::string_view text, std::string_view label,
                         const std::vector<std::string_view>& allowed) {
  auto value = trim(text);
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) {
    return std::string(value);
  }
  std::string choices;
  for (auto choice : allowed) choices += (choices.empty() ? "" : ", ") + std::string(choice);
  fail(label, text, fmt::format("expected one of {}", choices));
}

std::string validate_log_line_prefix(std::string_view text, std::string_view label) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    bool doubled = i + 1 < text.size() && text[i + 1] == c;
    if ((c == '{' || c == '}') && doubled) {
      ++i;
      continue;
    }
    if (c == '}') fail(label, text, "unmatched '}' (write '}}' for a literal brace)");
    if (c != '{') continue;
    auto close = text.find('}', i);
    if (close == std::string_view::npos) {
      fail(label, text, "unmatched '{' (write '{{' for a literal brace)");
    }
    auto name = text.substr(i + 1, close - i - 1);
    if (std::find(std::begin(kPrefixPlaceholders), std::end(kPrefixPlaceholders), name) ==
        std::end(kPrefixPlaceholders)) {
      fail(label, text,
           fmt::format("unknown placeholder {{{}}} (known: {{rank}} {{local_rank}} {{node}} "
                       "{{host}} {{role}} {{time}})",
                       name));
    }
    i = close;
  }
  return std::string(text);
}

std::string convert_log_line_prefix_template(std::string_view text, std::string_view /*label*/) {
  // torchrun's names, as ddprun's placeholders; any other stays as written, as torchrun's
  // safe_substitute leaves it.
  auto placeholder = [](std::string_view name) -> std::optional<std::string> {
    if (name == "rank" || name == "local_rank") return fmt::format("{{{}}}", name);
    if (name == "role_name") return std::string("{role}");
    return std::nullopt;
  };
  // Every brace of the user's text doubled: ddprun's prefix reads a single one as its own
  // placeholder, and "{rank}" written in torchrun's template is text, not the rank.
  return template_substitute(text, placeholder, double_braces);
}

std::string random_run_id() {
  // A random UUID (version 4): 122 random bits, the version nibble 4, the variant bits 10.
  unsigned char b[16];
  random_bytes(b, sizeof(b));
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  return fmt::format("{:02x}-{:02x}-{:02x}-{:02x}-{:02x}", fmt::join(b, b + 4, ""),
                     fmt::join(b + 4, b + 6, ""), fmt::join(b + 6, b + 8, ""),
                     fmt::join(b + 8, b + 10, ""), fmt::join(b + 10, b + 16, ""));
}

}  // namespace ddprun
