#pragma once
// Where each rank is, read from the debugger's output (process/stack_capture.hpp), and the
// ranks grouped by it: the few lines of the root-cause block that say which ranks wait in a
// collective and which one is elsewhere. Pure functions over text.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun {

struct StackFrame {
  std::string function;  // "all_reduce", "c10d::Work::wait", "<built-in method sleep ...>"
  std::string file;      // the source file, or for a native frame the library it is in
  int line = 0;          // 0: unknown
  std::string source;    // Python: the frame's source line, trimmed
  bool builtin = false;  // a Python built-in (C) function
};

// The frames of a capture, innermost first: the Python frames of the interpreter's current
// thread, and the native frames of the main thread (the thread whose id is `pid`).
struct ParsedStacks {
  std::vector<StackFrame> python;
  std::vector<StackFrame> native;
  std::string complaint;  // the debugger's own words when it could not attach, if it said
};
ParsedStacks parse_gdb_output(const std::string& text, int pid);

// Where a rank is: "in all_reduce, train.py:41 step()", and whether that is inside a
// collective operation of torch.distributed (c10d, Gloo, NCCL).
struct RankWhere {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  std::string host;
  int node = 0;
  std::string where;  // empty: no stack (see `note`)
  bool in_collective = false;
  std::string note;   // why there is no stack, or how the rank ended
};
RankWhere locate(const ParsedStacks& stacks);

// The ranks grouped by where they are, largest group first, one line each:
//   "ranks 0, 2 (2 of 3): in all_reduce, train.py:41 step()"
//   "rank 1 (1 of 3):     in time.sleep, train.py:37 load_batch()   <- not in the collective"
// A group outside any collective is marked when another group is inside one.
std::vector<std::string> group_ranks(const std::vector<RankWhere>& ranks, int world_size);

// Whether a failed rank's error (its traceback, message or last stderr lines) comes from inside
// a collective: a timeout or a lost peer reported by c10d, Gloo or NCCL.
bool mentions_collective(const std::string& text);

// Whether a failed rank's error is a collective's timeout (Gloo's "Timed out waiting ... for
// recv operation", NCCL's watchdog): the rank only waited, and a peer may be the one out of
// step. An ordinary error, or a lost peer, is not.
bool mentions_collective_timeout(const std::string& text);

// The ranks alive outside any collective while some other rank is inside one (a located rank,
// or a failed one whose error came from a collective); none when no rank is inside one.
std::vector<int> ranks_out_of_step(const std::vector<RankWhere>& ranks);

// The records of one node, as it shares them with the others through the store (and as the
// events file gets them).
nlohmann::json where_json(const std::vector<RankWhere>& ranks);
std::string where_to_json(const std::vector<RankWhere>& ranks);
// Throws Error on malformed JSON.
std::vector<RankWhere> where_from_json(const std::string& text);

// "0, 2, 5-9": ranks in order, runs of three or more as a range.
std::string format_rank_list(std::vector<int> ranks);

}  // namespace ddprun
