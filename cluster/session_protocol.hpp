#pragma once
// The conversation between the command (the head, `ddprun --hosts ...`) and each remote agent it
// starts over ssh. Pure: text in, values out, so that it is unit-tested without ssh.
//
//   head -> agent, on the agent's stdin (never on a command line that `ps` shows):
//     one hello line (JSON: protocol, version, token, host, working directory, environment,
//     the agent's arguments, hangup timeout), then control lines: "go", "ping", "signal N".
//     The working directory, the environment and the arguments are bytes, not necessarily
//     UTF-8: the hello carries them as text (bytes_to_utf8), exactly, and however long (an
//     argument on the remote shell's command line could not exceed 128 KiB).
//   agent -> head, on the agent's stdout among its workers' lines:
//     "<marker><token> <kind> <JSON>": kind "ready" (checks passed), "refused" (a check failed:
//     reason), "node_check" (--node-check's table, from the job's group rank 0), "result" (the
//     agent's end: summary, root cause, exit code), and from "go" to the agent's end, "alive"
//     every quarter of the hangup timeout (skipped while its stdout is busy), by which the
//     command tells a silent host from a quiet one whatever the remote shell (srun has no
//     keep-alive of ssh's kind).
// The token is random per job and known only to the head and its agents (workers do not get
// it), so a worker cannot forge a report by printing one.

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun {

inline constexpr int kSessionProtocol = 3;
// The remote command's first argument: the agent reads a hello from stdin before parsing the
// rest of its arguments as usual.
inline constexpr std::string_view kSessionFlag = "--ddprun-session";

struct SessionHello {
  int protocol = kSessionProtocol;
  std::string version;  // the head's ddprun version
  std::string token;
  std::string host;     // this host as the head lists it
  int node = 0;         // its node rank; every report it sends carries it
  // Tree fan-out: the hosts this agent starts and relays (cluster/tree.hpp's JSON); empty: none.
  nlohmann::json subtree = nlohmann::json::array();
  std::string remote_ddprun;  // ddprun's path on the hosts, for messages about them
  std::string cwd;      // the head's working directory, the workers' too
  std::map<std::string, std::string> env;  // set before the arguments are parsed
  std::vector<std::string> args;  // the agent's command line after its program name
  std::chrono::milliseconds hangup_timeout{10'000};
  // Until "go" the agent waits this long in silence: the command may be busy opening other
  // hosts' connections (and not pinging) for up to its --connect-timeout.
  std::chrono::milliseconds connect_timeout{30'000};
  // The command folds the console lines of every host (--fold-output): the agent tags them.
  bool fold_at_head = false;

  // How long the agent waits for "go" in silence: the longer of the two.
  std::chrono::milliseconds silence_before_go() const {
    return std::max(hangup_timeout, connect_timeout);
  }
};

// How often each side speaks when it has nothing to say (the command's "ping", the agent's
// "alive"): four times within the silence the other side allows.
inline std::chrono::milliseconds keep_alive_every(std::chrono::milliseconds silence) {
  return std::max(silence / 4, std::chrono::milliseconds(50));
}

std::string encode_hello(const SessionHello& hello);  // one line, without '\n'
// Throws Error naming what is wrong.
SessionHello decode_hello(std::string_view line);

struct Control {
  enum class Kind { kGo, kPing, kSignal };
  Kind kind = Kind::kPing;
  int signal = 0;
};
std::string encode_control(const Control& control);  // without '\n'
std::optional<Control> decode_control(std::string_view line);  // nullopt: not a control line

struct Report {
  enum class Kind {
    kReady,    // the agent's checks passed (body: nproc_per_node, pid)
    kRefused,  // a check failed (body: reason, exit_code)
    kResult,   // the agent's end (body: its summary, root cause and exit code)
    kEnded,    // from a relay (tree fan-out): a subtree host's remote shell exited (body: code,
               // stderr_tail, lost)
    kNodeCheck,  // --node-check's verdict for every host, as a table (body: table, findings)
    kAlive,      // the agent runs (body: the node alone); RemoteSession takes it
  };
  Kind kind = Kind::kReady;
  nlohmann::json body;  // every body has the host's "node"
};
// The kind as it is written on the line: "ready", "refused", "result", "ended", "node_check",
// "alive".
const char* to_string(Report::Kind kind);
std::string encode_report(std::string_view token, const Report& report);  // without '\n'
// nullopt when the line is not a report of a known kind carrying this token (an ordinary
// output line).
std::optional<Report> decode_report(std::string_view token, std::string_view line);
// Where a report begins inside `line`, npos when nowhere. Past 0: a worker writing to the
// agent's stdout itself (--raw-output) left its last line unended, and the report follows it.
std::size_t report_begins_at(std::string_view line);

// A random hex token (128 bits).
std::string random_token();

// Whether the environment variable is forwarded to every host by default: PATH,
// LD_LIBRARY_PATH, PYTHONPATH, PYTHON_EXEC, VIRTUAL_ENV and the CUDA_, NCCL_, GLOO_, OMP_,
// MKL_, TORCH_, PET_ families (PET_HOSTS and the other cluster-only flags excepted).
bool forwarded_by_default(std::string_view name);
// The variables every remote agent gets: the defaults from `env`, then each -x entry ("NAME"
// takes the value from `env` and is skipped when unset there; "NAME=VALUE" sets it). Throws
// ConfigError for an entry that is not a valid variable name.
std::map<std::string, std::string> forwarded_environment(
    const std::map<std::string, std::string>& env, const std::vector<std::string>& extra);

// The command ssh runs on a host (ssh hands it to the remote user's shell as one string).
std::string remote_command(std::string_view ddprun_path, const std::vector<std::string>& args);

}  // namespace ddprun
