#pragma once
// Folding of identical console lines across ranks (--fold-output). The first occurrence of a
// line prints at once; the same line from other ranks within a window does not, and one summary
// line names them when the window ends: "[ranks 1-1023 on 512 hosts] the same: epoch 3 done".
// Lines that differ only in their numbers fold too (unless the mode is exact), and the summary
// shows each number's range: "step 20 loss 0.71-0.74".
//
// What it keeps:
// - A rank's order. A rank whose line folded waits for that line's summary: its next lines are
//   held until then (at most a window), so every line of a rank, printed or named by a summary,
//   comes in the order it wrote them.
// - Every line. A line that differs prints (at once, or when its rank's wait ends); a rank's own
//   lines never fold into each other (the same line again from the rank that printed it ends
//   the group, summary first).
// - Files are not its business: they get every byte upstream.
// Single-threaded: every call on the executor's thread.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace ddprun {

enum class FoldMode : std::uint8_t {
  kOff,
  kNumbers,  // lines equal but for their numbers fold (--fold-output=on)
  kExact,    // only identical lines fold
};

enum class FoldOutput : std::uint8_t;  // common/launch_config.hpp

// --fold-output as it applies to the console on `fd` (the agent's, or the --hosts command's):
// auto folds a terminal only; --raw-output is never folded, its lines going past the agent.
FoldMode fold_mode_for(FoldOutput setting, bool raw_output, int fd);

// How long the same line from other ranks still folds into its first occurrence: a summary is
// never later than this after the line it stands for.
inline constexpr std::chrono::milliseconds kFoldWindow{500};

// The numbers of a line, for folding: where each one is, and the line with each replaced by a
// marker (the key lines fold by). A number starts at a digit (or a '-' before one) that does not
// continue a word ("resnet18", "cuda0" and "x86_64" stay text) and may have a fraction and an
// exponent; a unit after it ("10ms") stays text, and so does a dotted run ("10.0.0.1", "2.1.0").
struct LineNumbers {
  std::string key;
  struct Span {
    std::size_t pos = 0;
    std::size_t size = 0;
  };
  std::vector<Span> spans;
};
LineNumbers find_numbers(std::string_view text);

// Under --hosts the command folds the lines of every host: each agent's console lines carry
// their rank, host and prefix to it, "\x1e<rank> <host> <prefix size>\x1f<prefix><text>" (a
// worker's own line is never read as one: the agent writes the tag before it).
std::string tag_console_line(int rank, std::string_view host, std::string_view prefix,
                             std::string_view text);
struct TaggedLine {
  int rank = 0;
  std::string_view host, prefix, text;
};
// nullopt: not a tagged line (the remote shell's own, or an agent's log line).
std::optional<TaggedLine> untag_console_line(std::string_view line);

// "1-3,5,7-9": a sorted, duplicate-free list of ranks as ranges.
std::string format_rank_ranges(const std::vector<int>& sorted_ranks);

class ConsoleFold {
 public:
  // `write` prints what a window's end produces (a summary) on the console `fd`.
  using Write = std::function<void(int fd, std::string_view bytes)>;
  ConsoleFold(boost::asio::any_io_executor executor, Write write,
              std::chrono::milliseconds window = kFoldWindow);
  ~ConsoleFold();
  ConsoleFold(const ConsoleFold&) = delete;
  ConsoleFold& operator=(const ConsoleFold&) = delete;

  // One whole line for console `fd` from `rank` (on `host`: "" when every rank is on one).
  // Appends to `out` what the console shows now, in order: a summary that must come first, then
  // the line with its `prefix` and a newline; nothing when the line folds or its rank waits.
  void add(int fd, FoldMode mode, int rank, std::string_view host, std::string_view prefix,
           std::string_view text, std::string& out);
  // Every pending summary and held line, now (the ranks are done, or something is about to be
  // said about them).
  void flush();
  std::size_t pending() const { return groups_.size(); }
  std::uint64_t folded_lines() const { return folded_lines_; }

 private:
  struct Held {
    FoldMode mode;
    std::string host, prefix, text;
  };
  // A rank's stream: how many groups hold one of its lines, and what it wrote since.
  struct RankState {
    int waiting_on = 0;
    std::deque<Held> held;
  };
  using RankKey = std::pair<int, int>;  // fd, rank
  struct RankKeyHash {
    std::size_t operator()(const RankKey& k) const {
      return std::hash<long long>()((static_cast<long long>(k.first) << 32) ^
                                    static_cast<unsigned>(k.second));
    }
  };

  void process(int fd, FoldMode mode, int rank, std::string_view host, std::string_view prefix,
               std::string_view text, std::string& out);
  // The group's summary (if it folded anything) into `out`, its ranks released, their held
  // lines processed after it.
  struct Group;
  void end_group(Group& group, std::string& out);
  void release(int fd, const std::vector<int>& ranks, std::string& out);
  struct Range {
    double low = 0, high = 0;
    std::string low_text, high_text;
  };
  struct Group {
    int fd = -1;
    std::uint64_t id = 0;
    std::string text;  // the first occurrence, without prefix
    std::vector<LineNumbers::Span> spans;
    std::vector<Range> ranges;  // per number, over the folded lines
    std::unordered_set<int> members;  // the first rank and the folded ones
    std::vector<int> folded;
    std::unordered_set<std::string> hosts;
  };

  std::string summary(Group& group) const;
  void arm_timer();
  void on_timer();

  Write write_;
  std::chrono::milliseconds window_;
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::uint64_t next_id_ = 0;
  std::uint64_t folded_lines_ = 0;
  std::unordered_map<std::string, Group> groups_;  // by fd and key
  std::unordered_map<RankKey, RankState, RankKeyHash> ranks_;
  struct Expiry {
    std::chrono::steady_clock::time_point when;
    std::string key;
    std::uint64_t id;
  };
  std::deque<Expiry> expiries_;  // in the order the groups began, so by `when`
};

}  // namespace ddprun
