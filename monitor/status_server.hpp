#pragma once
// An agent's (or a --hosts command's) HTTP endpoints, served with Boost.Beast on a thread of
// their own:
//   - a control socket: a Unix socket in the user's private control directory, which
//     `ddprun status` finds: GET /status (the node records, JSON) and GET /stacks;
//   - with --metrics-port, TCP: GET /metrics (Prometheus's text format) and nothing else,
//     since a worker's output lines are not for whoever can reach a port.
// One request per connection. A client gets `request_timeout` to send its request, and again to
// read the answer once it is made, and at most `max_connections` are open at once on each
// listener (more are closed at once), so a slow or hostile client costs a bounded amount and
// never the agent's own work: the answers are computed on a small pool, never on the agent's
// threads.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddprun {

struct StatusServerOptions {
  std::string control_path;   // empty: no control socket
  std::string metrics_addr;   // with metrics_port >= 0
  int metrics_port = -1;      // -1: no metrics; 0: the kernel picks
  std::size_t max_connections = 32;
  std::chrono::milliseconds request_timeout{5000};
};

struct StatusHandlers {
  std::function<std::string()> status;   // JSON: {"nodes": [...]}
  std::function<std::string()> metrics;  // Prometheus text
  // JSON: {"stacks": [...]} or {"error": "..."}; null: not offered.
  std::function<std::string()> stacks;
};

class StatusServer {
 public:
  // Binds both now. Throws ConnectionError naming the address when the metrics port cannot be
  // bound; a control socket that cannot be made is a warning (control_path() is then empty).
  StatusServer(StatusServerOptions options, StatusHandlers handlers);
  ~StatusServer();  // stops, joins, removes the control socket
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int metrics_port() const;  // as bound; -1 without metrics
  const std::string& control_path() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The user's private directory for control sockets: $XDG_RUNTIME_DIR/ddprun, else
// /tmp/ddprun-<uid>; made 0700 when missing. Throws Error when it exists but is not a directory
// of this user's that only this user can enter.
std::string control_dir();

// "<control_dir>/<pid>.sock" for this process.
std::string control_socket_path();

// The directories where this user's processes may have their sockets, for `ddprun status`:
// $XDG_RUNTIME_DIR/ddprun, <user_runtime_root>/<uid>/ddprun (a login session's, for a status
// run without XDG_RUNTIME_DIR) and /tmp/ddprun-<uid> (an agent started without
// XDG_RUNTIME_DIR, by ssh or Slurm, uses it), each only when it exists and passes
// control_dir()'s checks.
std::vector<std::string> control_dirs_to_scan(const std::string& user_runtime_root = "/run/user");

}  // namespace ddprun
