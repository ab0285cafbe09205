#include "cluster/session_protocol.hpp"

#include <array>
#include <cctype>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/random.hpp"
#include "common/strings.hpp"

namespace ddprun {

namespace {

using nlohmann::json;

// Starts every report line: an ASCII record separator, which no ordinary output line begins with.
constexpr std::string_view kReportMarker = "\x1e" "ddprun ";

constexpr std::array<std::string_view, 5> kForwardedNames = {
    "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHON_EXEC", "VIRTUAL_ENV"};
constexpr std::array<std::string_view, 7> kForwardedPrefixes = {
    "CUDA_", "NCCL_", "GLOO_", "OMP_", "MKL_", "TORCH_", "PET_"};
// PET_* of the flags that mean something only to the command, or that it sets for each host
// itself: a remote agent must not start a cluster itself (PET_HOSTS), run alone
// (PET_STANDALONE) or look for the command's files on its own host (PET_TOKEN_FILE). Every
// flag with such a role in launcher/cli.cpp is here (a launcher test checks it).
constexpr std::array<std::string_view, 20> kHeadOnlyPet = {
    "PET_HOSTS",          "PET_HOSTFILE",          "PET_SSH_COMMAND",  "PET_REMOTE_DDPRUN",
    "PET_NO_STAGE",       "PET_CONNECT_TIMEOUT",   "PET_HANGUP_TIMEOUT", "PET_FANOUT",
    "PET_TREE_THRESHOLD", "PET_DRY_RUN",           "PET_TOKEN_FILE",   "PET_NNODES",
    "PET_NODE_RANK",      "PET_MASTER_ADDR",       "PET_MASTER_PORT",  "PET_RDZV_ENDPOINT",
    "PET_RDZV_ID",        "PET_STANDALONE",        "PET_LOCAL_ADDR",   "PET_NPROC_PER_NODE"};

bool valid_env_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

std::string encode_hello(const SessionHello& h) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : h.env) env[bytes_to_utf8(name)] = bytes_to_utf8(value);
  std::vector<std::string> args;
  for (const auto& arg : h.args) args.push_back(bytes_to_utf8(arg));
  return json{{"protocol", h.protocol}, {"version", h.version},   {"token", h.token},
              {"host", h.host},         {"node", h.node},         {"subtree", h.subtree},
              {"remote_ddprun", h.remote_ddprun},
              {"cwd", bytes_to_utf8(h.cwd)}, {"env", env}, {"args", args},
              {"hangup_timeout_ms", h.hangup_timeout.count()},
              {"connect_timeout_ms", h.connect_timeout.count()},
              {"fold_at_head", h.fold_at_head}}
      .dump();
}

SessionHello decode_hello(std::string_view line) {
  SessionHello h;
  try {
    auto j = json::parse(line);
    h.protocol = j.at("protocol").get<int>();
    if (h.protocol != kSessionProtocol) {
      throw Error(fmt::format("the command speaks session protocol {}, this ddprun {}",
                              h.protocol, kSessionProtocol));
    }
    h.version = j.at("version").get<std::string>();
    h.token = j.at("token").get<std::string>();
    h.host = j.at("host").get<std::string>();
    h.node = j.at("node").get<int>();
    h.subtree = j.at("subtree");
    h.remote_ddprun = j.at("remote_ddprun").get<std::string>();
    if (!h.subtree.is_array()) throw Error("malformed session hello: the subtree is not a list");
    h.cwd = bytes_from_utf8(j.at("cwd").get<std::string>());
    for (const auto& [name, value] : j.at("env").get<std::map<std::string, std::string>>()) {
      h.env[bytes_from_utf8(name)] = bytes_from_utf8(value);
    }
    for (const auto& arg : j.at("args").get<std::vector<std::string>>()) {
      h.args.push_back(bytes_from_utf8(arg));
    }
    h.hangup_timeout = std::chrono::milliseconds(j.at("hangup_timeout_ms").get<long long>());
    h.connect_timeout = std::chrono::milliseconds(j.at("connect_timeout_ms").get<long long>());
    h.fold_at_head = j.value("fold_at_head", false);
  } catch (const json::exception& e) {
    throw Error(fmt::format("malformed session hello ({} bytes): {}", line.size(), e.what()));
  } catch (const Error& e) {
    throw Error(fmt::format("malformed session hello ({} bytes): {}", line.size(), e.what()));
  }
  if (h.token.empty()) throw Error("malformed session hello: empty token");
  return h;
}

std::string encode_control(const Control& c) {
  switch (c.kind) {
    case Control::Kind::kGo:
      return "go";
    case Control::Kind::kPing:
      return "ping";
    case Control::Kind::kSignal:
      return fmt::format("signal {}", c.signal);
  }
  return "ping";
}

std::optional<Control> decode_control(std::string_view line) {
  if (line == "go") return Control{Control::Kind::kGo, 0};
  if (line == "ping") return Control{Control::Kind::kPing, 0};
  if (line.starts_with("signal ")) {
    auto n = parse_int(line.substr(7));
    if (n && *n > 0 && *n < 65) return Control{Control::Kind::kSignal, static_cast<int>(*n)};
  }
  return std::nullopt;
}

const char* to_string(Report::Kind kind) {
  switch (kind) {
    case Report::Kind::kReady:
      return "ready";
    case Report::Kind::kRefused:
      return "refused";
    case Report::Kind::kResult:
      return "result";
    case Report::Kind::kEnded:
      return "ended";
    case Report::Kind::kNodeCheck:
      return "node_check";
    case Report::Kind::kAlive:
      return "alive";
  }
  return "?";
}

std::string encode_report(std::string_view token, const Report& r) {
  return fmt::format("{}{} {} {}", kReportMarker, token, to_string(r.kind), r.body.dump());
}

std::size_t report_begins_at(std::string_view line) { return line.find(kReportMarker); }

std::optional<Report> decode_report(std::string_view token, std::string_view line) {
  if (!line.starts_with(kReportMarker)) return std::nullopt;
  line.remove_prefix(kReportMarker.size());
  if (token.empty() || !line.starts_with(token) || line.size() <= token.size() ||
      line[token.size()] != ' ') {
    return std::nullopt;
  }
  line.remove_prefix(token.size() + 1);
  auto space = line.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto word = line.substr(0, space);
  Report r;
  bool known = false;
  for (auto kind : {Report::Kind::kReady, Report::Kind::kRefused, Report::Kind::kResult,
                    Report::Kind::kEnded, Report::Kind::kNodeCheck, Report::Kind::kAlive}) {
    if (word == to_string(kind)) {
      r.kind = kind;
      known = true;
    }
  }
  if (!known) return std::nullopt;
  try {
    r.body = json::parse(line.substr(space + 1));
  } catch (const json::exception&) {
    return std::nullopt;
  }
  return r;
}

std::string random_token() { return random_hex(16); }

bool forwarded_by_default(std::string_view name) {
  for (auto head_only : kHeadOnlyPet) {
    if (name == head_only) return false;
  }
  for (auto n : kForwardedNames) {
    if (name == n) return true;
  }
  for (auto prefix : kForwardedPrefixes) {
    if (name.starts_with(prefix)) return true;
  }
  return false;
}

std::map<std::string, std::string> forwarded_environment(
    const std::map<std::string, std::string>& env, const std::vector<std::string>& extra) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : env) {
    if (forwarded_by_default(name)) out[name] = value;
  }
  for (const auto& entry : extra) {
    auto eq = entry.find('=');
    std::string name = entry.substr(0, eq);
    if (!valid_env_name(name)) {
      throw ConfigError(fmt::format("-x {}: not an environment variable name (expected NAME or "
                                    "NAME=VALUE)", entry));
    }
    if (eq != std::string::npos) {
      out[name] = entry.substr(eq + 1);
    } else if (auto it = env.find(name); it != env.end()) {
      out[name] = it->second;
    }
  }
  return out;
}

std::string remote_command(std::string_view ddprun_path, const std::vector<std::string>& args) {
  std::string out = "exec " + shell_quote(ddprun_path);
  for (const auto& arg : args) out += " " + shell_quote(arg);
  return out;
}

}  // namespace ddprun
