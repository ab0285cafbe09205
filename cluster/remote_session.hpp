#pragma once
// One host's agent as the command sees it: a remote-shell process (ssh HOST ddprun ...) with
// the session on its stdin, and its stdout and stderr relayed line by line to the command's own
// stdout and stderr, one write per batch of whole lines (lines from different hosts never
// interleave). Report lines carrying the job's token are taken out of the stream and handed to
// `on_report`. From the agent's first sign of life ("alive") on, a remote shell that brings
// nothing for `silence` is ended (lost() says why): a host that froze or fell off the network
// under a remote shell without a keep-alive of its own (srun) is not waited for. Everything
// runs on the io_context's thread.

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "cluster/session_protocol.hpp"
#include "cluster/staging.hpp"

namespace ddprun {

// Why a remote shell ended (with `code`) before its agent said whether it was ready, in words.
std::string early_end_reason(int code, const std::deque<std::string>& stderr_tail,
                             const std::string& remote_ddprun);

class RemoteSession {
 public:
  using BinaryReady =
      std::function<void(std::shared_ptr<const StagedBinary> binary, const std::string& why_not)>;

  struct Handlers {
    std::function<void(const Report&)> on_report;
    // Once: the process exited and both streams reached their end. `code` is shell-style
    // (ssh: the remote command's code, 255 when the connection failed).
    std::function<void(int code)> on_ended;
    // Asked for the binary when the remote command stages ddprun (cluster/staging.hpp), on the
    // io_context's thread; it calls `ready` (at once or later, on the same thread) with the
    // binary, or null and why not. Unset: requests are ignored (the remote command does not
    // stage).
    std::function<void(BinaryReady ready)> binary;
    // Each output line that is neither a report nor held: true when it took the line (and
    // appended to `batch` what the console shows of it); unset or false: printed as it is.
    std::function<bool(bool is_err, const std::string& line, std::string& batch)> console;
  };

  // What staging did on this host: nothing, a cached copy ran, or the binary was sent.
  struct Staging {
    bool cached = false;
    bool sent = false;
    bool broadcast = false;  // the bytes were in a file on the host (sbcast)
    double seconds = 0;  // from the first request to the copy in place
    // {} when nothing; else {"staging": "sent"|"cached", "staged_seconds", "broadcast"}
    nlohmann::json to_json() const;
  };

  // `argv`: the remote shell's command line, host and remote command included.
  RemoteSession(boost::asio::io_context& io, std::vector<std::string> argv, std::string token,
                Handlers handlers, std::chrono::milliseconds silence);
  ~RemoteSession();  // SIGKILLs the process if it still runs
  RemoteSession(const RemoteSession&) = delete;
  RemoteSession& operator=(const RemoteSession&) = delete;

  // Starts the process (in its own process group, killed if this process dies) and sends
  // `hello` as its first input line. Throws Error when it cannot be started.
  void start(const std::string& hello);
  // Queues one line (without '\n') for the agent's stdin. Until the agent's first report the
  // line is held (a remote command that stages ddprun reads its stdin until then); the control
  // lines sent in that time are pings, which the agent does not need before its checks end.
  void send(const std::string& line);
  // End of input: the agent stops (before "go": without starting anything).
  void close_input();
  void kill();
  // Until release_stderr(), stderr lines are kept (the last ones) instead of printed: a host
  // that fails its checks is reported in one line, not with the remote shell's noise.
  void release_stderr();
  // Its last stderr lines (held or printed).
  const std::deque<std::string>& stderr_tail() const;
  // Why this session ended its remote shell itself (it fell silent); empty otherwise.
  const std::string& lost() const;
  int pid() const;
  const Staging& staging() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ddprun
