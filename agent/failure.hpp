#pragma once
// The job's root cause: the first failure in time across all nodes (first in the store's order),
// with everything an operator needs to find it. Shared between agents as JSON.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/process_runner.hpp"

namespace ddprun {

struct Failure {
  // kMembership: the round must re-form (a node joined, left or died); not a failure of the job.
  enum class Kind : std::uint8_t { kWorker, kSignal, kAgent, kMembership };
  Kind kind = Kind::kWorker;
  std::string host;
  int node = 0;        // group rank
  int rank = -1;       // global rank, -1 when not a worker
  int local_rank = -1;
  int pid = 0;
  int exit_code = 0;   // shell-style: 128+N for signal N
  int signal = 0;
  int attempt = 0;
  double unix_time = 0;
  std::string message;     // error file message, or the agent's reason
  std::string traceback;   // error file py_callstack
  std::vector<std::string> stderr_tail;
  int lost_node = -1;  // a node declared dead (it will not say goodbye), -1: none

  std::string to_json() const;
  // Throws Error on malformed JSON.
  static Failure from_json(const std::string& text);
};

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

// The readable multi-line block every agent prints once about the root cause.
std::string format_root_cause(const Failure& failure, int world_size);

// "SIGSEGV" for 11; "signal 64" for unknown numbers.
std::string signal_name(int signal);

}  // namespace ddprun
