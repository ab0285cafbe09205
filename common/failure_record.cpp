#include "common/failure_record.hpp"

#include <string.h>
#include <unistd.h>

#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ddprun {

using nlohmann::json;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

Failure agent_failure(const std::string& host, int node, int attempt, Failure::Kind kind,
                      int exit_code, const std::string& message) {
  Failure f;
  f.kind = kind;
  f.host = host;
  f.node = node;
  f.pid = static_cast<int>(getpid());
  f.attempt = attempt;
  f.unix_time = unix_seconds();
  f.message = message;
  f.exit_code = exit_code;
  return f;
}

std::string killed_by(int signal, bool out_of_memory) {
  return out_of_memory ? fmt::format("killed by {}: out of memory (the kernel's OOM killer)",
                                     signal_name(signal))
                       : "killed by " + signal_name(signal);
}

std::string Failure::to_json() const {
  json j = {{"kind", static_cast<int>(kind)}, {"host", host},       {"node", node},
            {"rank", rank},                   {"local_rank", local_rank}, {"pid", pid},
            {"exit_code", exit_code},         {"signal", signal},   {"attempt", attempt},
            {"time", unix_time},              {"message", message}, {"traceback", traceback},
            {"stderr_tail", stderr_tail}, {"lost_node", lost_node},
            {"where", where},             {"stacks", stacks},
            {"out_of_memory", out_of_memory}};
  // Worker output is not always valid UTF-8 (binary junk, a line cut mid-character): replace
  // what cannot be encoded rather than fail to report the failure.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Failure Failure::from_json(const std::string& text) {
  try {
    auto j = json::parse(text);
    Failure f;
    const int kind = j.at("kind").get<int>();
    if (kind < 0 || kind > static_cast<int>(Kind::kHang)) {
      throw Error(fmt::format("malformed failure record in the store: unknown kind {}", kind));
    }
    f.kind = static_cast<Kind>(kind);
    f.host = j.at("host").get<std::string>();
    f.node = j.at("node").get<int>();
    f.rank = j.at("rank").get<int>();
    f.local_rank = j.at("local_rank").get<int>();
    f.pid = j.at("pid").get<int>();
    f.exit_code = j.at("exit_code").get<int>();
    f.signal = j.at("signal").get<int>();
    f.attempt = j.at("attempt").get<int>();
    f.unix_time = j.at("time").get<double>();
    f.message = j.at("message").get<std::string>();
    f.traceback = j.at("traceback").get<std::string>();
    f.stderr_tail = j.at("stderr_tail").get<std::vector<std::string>>();
    f.lost_node = j.value("lost_node", -1);
    f.where = j.value("where", std::vector<std::string>{});
    f.stacks = j.value("stacks", std::string());
    f.out_of_memory = j.value("out_of_memory", false);
    return f;
  } catch (const json::exception& e) {
    throw Error(fmt::format("malformed failure record in the store: {}", e.what()));
  }
}

}  // namespace ddprun
