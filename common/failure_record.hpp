#pragma once
// Why a round or a job ended, as every agent of the job shares it through the store (JSON).
// A round ends with the first value written to its outcome key: "success", or one of these.
// The agent writes worker, signal and agent failures; the rendezvous writes membership changes
// (a node joined late, left or died) that make the round re-form.

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun {

// The value of a round's outcome key once every node's workers exited 0.
inline constexpr const char* kRoundSucceeded = "success";

struct Failure {
  // kMembership: the round must re-form (a node joined, left or died); not a failure of the job.
  // kHang: the workers stopped making progress (--hang-timeout), a FileTimer expired, or a rank
  // stayed alive outside a collective that the others failed in; it spends a restart.
  enum class Kind : std::uint8_t { kWorker, kSignal, kAgent, kMembership, kHang };
  Kind kind = Kind::kWorker;
  std::string host;
  int node = 0;        // group rank
  int rank = -1;       // global rank, -1 when not a worker
  int local_rank = -1;
  int pid = 0;
  int exit_code = 0;   // shell-style: 128+N for signal N
  int signal = 0;
  bool out_of_memory = false;  // the kernel's OOM killer sent the signal
  int attempt = 0;
  double unix_time = 0;
  std::string message;     // error file message, or the agent's reason
  std::string traceback;   // error file py_callstack
  std::vector<std::string> stderr_tail;
  int lost_node = -1;  // a node declared dead (it will not say goodbye), -1: none
  // Where the live ranks were when the round ended, grouped ("ranks 0, 2 (2 of 3): in
  // all_reduce, train.py:41 step()"), and where their full stacks were written; empty when
  // no stack was taken.
  std::vector<std::string> where;
  std::string stacks;

  std::string to_json() const;
  // Throws Error on malformed JSON.
  static Failure from_json(const std::string& text);
};

// A failure of the agent itself (not of a worker) on `host`, stamped now.
Failure agent_failure(const std::string& host, int node, int attempt, Failure::Kind kind,
                      int exit_code, const std::string& message);

// Wall-clock seconds since the epoch, the time base of Failure::unix_time.
double unix_seconds();

// "SIGSEGV" for 11; "signal 64" for unknown numbers.
std::string signal_name(int signal);

// "killed by SIGKILL", and why when the kernel's OOM killer did it.
std::string killed_by(int signal, bool out_of_memory);

}  // namespace ddprun
