#pragma once
// A worker's failure as the agent reports it: built from its exit and its error file, and the
// root-cause block printed once at the end (the earliest failure of the job in time).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/failure_record.hpp"
#include "process/process_runner.hpp"

namespace ddprun {

// Builds the failure of a worker that exited, reading its error file if one was written. Its
// time is when the worker failed: the error file's timestamp when it is earlier than the exit
// (a worker's teardown can take a while, and its peers may fail meanwhile).
Failure worker_failure(const WorkerExit& exit, const std::string& error_file,
                       const std::string& host, int node, int attempt);

// What a worker's error file says.
struct ErrorFile {
  std::string message;
  std::string traceback;
  double timestamp = 0;  // unix seconds when the worker failed, 0 when not given
};
// Reads torchrun's error file format (both the nested and the older flat "message" forms).
// Returns nullopt when the file does not exist or cannot be parsed.
std::optional<ErrorFile> read_error_file(const std::string& path);

// A root cause a restart answers: a worker's failure, a hang, or a node without the resources
// its workers need. With no restart left it ends the job on every node.
bool restartable(const Failure& root);

// Whether the job restarts after a round that ended with `root`, `restarts` of `max_restarts`
// spent and `signal` received by the agent (0: none): a restartable root cause, while restarts
// are left and no signal stops the agent. Anything else ends the job; a membership change
// re-forms it without spending one.
bool restarts_after(const Failure& root, int restarts, int max_restarts, int signal);

// The readable multi-line block every agent prints once about the root cause. `log_dir`: this
// node's log directory when it is kept and the user did not name it (else empty: not shown).
std::string format_root_cause(const Failure& failure, int world_size,
                              const std::string& log_dir = "");


}  // namespace ddprun
