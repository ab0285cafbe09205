#pragma once
// `ddprun status`'s side: the agents and --hosts commands this user runs on this machine,
// found through their control sockets (monitor/status_server.hpp), and asked over HTTP.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/status_board.hpp"
#include "common/deadline.hpp"
#include "common/error.hpp"

namespace ddprun {

// The control socket is there but nobody listens on it, or it is gone.
class NobodyListensError : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

// GET `target` from the control socket at `path`; returns the body of a 200 answer. Throws
// NobodyListensError when the socket refuses or is gone (its process is), ConnectionError when
// it cannot connect otherwise, TimeoutError by `deadline`, or Error for a broken exchange or any
// other answer (with the body's "error").
std::string control_get(const std::string& path, const std::string& target, Deadline deadline);

struct LocalProcess {
  std::string socket;  // its control socket
  int pid = 0;         // the process that listens on it (the socket's name)
  std::vector<NodeStatus> nodes;  // what it answered (an agent: itself and what it read of its job)
  // An agent, with ranks of its own (a --hosts command only relays the store's records).
  bool is_agent() const;
};

// Asks every control socket in this user's control directories (control_dirs_to_scan), in
// parallel, within `deadline`. A socket nobody listens on whose process is gone (it was killed)
// is removed; one that does not answer in time is named in `unanswered`.
struct LocalScan {
  std::vector<LocalProcess> processes;
  std::vector<std::string> unanswered;
};
LocalScan scan_local(Deadline deadline);

}  // namespace ddprun
