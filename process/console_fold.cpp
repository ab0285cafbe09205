#include "process/console_fold.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <memory>

#include <fmt/format.h>

#include "common/launch_config.hpp"

namespace ddprun {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A character that continues a word: a digit after one is part of a name, not a number.
bool is_word(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.';
}

// The end of the number starting at `i` (a digit, or '-' before one).
std::size_t number_end(std::string_view text, std::size_t i) {
  if (text[i] == '-') ++i;
  while (i < text.size() && is_digit(text[i])) ++i;
  if (i + 1 < text.size() && text[i] == '.' && is_digit(text[i + 1])) {
    i += 2;
    while (i < text.size() && is_digit(text[i])) ++i;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    std::size_t j = i + 1;
    if (j < text.size() && (text[j] == '-' || text[j] == '+')) ++j;
    if (j < text.size() && is_digit(text[j])) {
      while (j < text.size() && is_digit(text[j])) ++j;
      i = j;
    }
  }
  return i;
}

double number_value(std::string_view text) {
  double v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

// The key's marker for a number; a marker byte in the text itself is escaped, so that no text
// can pass for another's key.
constexpr char kNumberMark = '\x01';
constexpr char kEscape = '\x02';

}  // namespace

FoldMode fold_mode_for(FoldOutput setting, bool raw_output, int fd) {
  if (raw_output) return FoldMode::kOff;
  switch (setting) {
    case FoldOutput::kOn: return FoldMode::kNumbers;
    case FoldOutput::kExact: return FoldMode::kExact;
    case FoldOutput::kAuto: return ::isatty(fd) == 1 ? FoldMode::kNumbers : FoldMode::kOff;
    case FoldOutput::kOff: break;
  }
  return FoldMode::kOff;
}

LineNumbers find_numbers(std::string_view text) {
  LineNumbers out;
  out.key.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const bool digit_next = i + 1 < text.size() && is_digit(text[i + 1]);
    const bool starts =
        (is_digit(c) || (c == '-' && digit_next)) && (i == 0 || !is_word(text[i - 1]));
    // A dotted run of numbers (an address, a version) is text: "10.0.0.1" is no range.
    const auto end = starts ? number_end(text, i) : i;
    const bool dotted = starts && end + 1 < text.size() && text[end] == '.' &&
                        is_digit(text[end + 1]);
    if (starts && !dotted) {
      out.spans.push_back({i, end - i});
      out.key += kNumberMark;
      i = end;
      continue;
    }
    if (is_word(c) || dotted) {  // a whole word, digits in it included
      const auto begin = i++;  // a dotted run may begin with '-'
      while (i < text.size() && is_word(text[i])) ++i;
      out.key.append(text.substr(begin, i - begin));
      continue;
    }
    if (c == kNumberMark || c == kEscape) out.key += kEscape;
    out.key += c;
    ++i;
  }
  return out;
}

std::string tag_console_line(int rank, std::string_view host, std::string_view prefix,
                             std::string_view text) {
  std::string out = fmt::format("\x1e{} {} {}\x1f", rank, host, prefix.size());
  out.append(prefix).append(text);
  return out;
}

std::optional<TaggedLine> untag_console_line(std::string_view line) {
  if (!line.starts_with('\x1e')) return std::nullopt;
  const auto head_end = line.find('\x1f');
  if (head_end == std::string_view::npos) return std::nullopt;
  const auto head = line.substr(1, head_end - 1);
  const auto space1 = head.find(' ');
  const auto space2 = head.rfind(' ');
  if (space1 == std::string_view::npos || space1 == space2) return std::nullopt;
  TaggedLine out;
  std::size_t prefix_size = 0;
  const auto rank = head.substr(0, space1);
  const auto size = head.substr(space2 + 1);
  const auto whole = [](std::string_view digits, auto& value) {
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return ec == std::errc() && end == digits.data() + digits.size();
  };
  if (!whole(rank, out.rank) || !whole(size, prefix_size)) return std::nullopt;
  const auto rest = line.substr(head_end + 1);
  if (prefix_size > rest.size()) return std::nullopt;
  out.host = head.substr(space1 + 1, space2 - space1 - 1);
  out.prefix = rest.substr(0, prefix_size);
  out.text = rest.substr(prefix_size);
  return out;
}

std::string format_rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

ConsoleFold::ConsoleFold(boost::asio::any_io_executor executor, Write write,
                         std::chrono::milliseconds window)
    : write_(std::move(write)), window_(window), timer_(std::move(executor)) {}

ConsoleFold::~ConsoleFold() { timer_.cancel(); }

void ConsoleFold::add(int fd, FoldMode mode, int rank, std::string_view host,
                      std::string_view prefix, std::string_view text, std::string& out) {
  if (mode == FoldMode::kOff) {
    out.append(prefix).append(text) += '\n';
    return;
  }
  if (auto it = ranks_.find({fd, rank}); it != ranks_.end() && it->second.waiting_on > 0) {
    it->second.held.push_back(
        {mode, std::string(host), std::string(prefix), std::string(text)});
    return;
  }
  process(fd, mode, rank, host, prefix, text, out);
}

void ConsoleFold::process(int fd, FoldMode mode, int rank, std::string_view host,
                          std::string_view prefix, std::string_view text, std::string& out) {
  LineNumbers numbers;
  if (mode == FoldMode::kNumbers) {
    numbers = find_numbers(text);
  } else {
    numbers.key = text;
  }
  std::string key;
  key.reserve(numbers.key.size() + 2);
  key += static_cast<char>('0' + fd);
  key += mode == FoldMode::kNumbers ? 'N' : 'E';
  key += numbers.key;

  if (auto it = groups_.find(key); it != groups_.end()) {
    Group& group = it->second;
    if (!group.members.contains(rank)) {
      group.members.insert(rank);
      group.folded.push_back(rank);
      ++ranks_[{fd, rank}].waiting_on;
      if (!host.empty()) group.hosts.emplace(host);
      for (std::size_t n = 0; n < numbers.spans.size(); ++n) {
        const auto piece = text.substr(numbers.spans[n].pos, numbers.spans[n].size);
        const double v = number_value(piece);
        Range& r = group.ranges[n];
        if (group.folded.size() == 1 || v < r.low) {
          r.low = v;
          r.low_text = piece;
        }
        if (group.folded.size() == 1 || v > r.high) {
          r.high = v;
          r.high_text = piece;
        }
      }
      ++folded_lines_;
      return;
    }
    // The same rank again (the one that printed it: the others wait): the group ends here,
    // summarized before this line. The ranks it releases may start the group anew, and this
    // line then folds into theirs.
    Group ended = std::move(group);
    groups_.erase(it);
    end_group(ended, out);
    if (groups_.contains(key)) {
      process(fd, mode, rank, host, prefix, text, out);
      return;
    }
  }
  out.append(prefix).append(text) += '\n';
  Group group;
  group.fd = fd;
  group.id = ++next_id_;
  group.text = text;
  group.spans = std::move(numbers.spans);
  group.ranges.resize(group.spans.size());
  group.members.insert(rank);
  expiries_.push_back({std::chrono::steady_clock::now() + window_, key, group.id});
  groups_.emplace(std::move(key), std::move(group));
  arm_timer();
}

void ConsoleFold::end_group(Group& group, std::string& out) {
  if (group.folded.empty()) return;
  out += summary(group);
  release(group.fd, group.folded, out);
}

void ConsoleFold::release(int fd, const std::vector<int>& ranks, std::string& out) {
  for (const int rank : ranks) {
    auto it = ranks_.find({fd, rank});
    if (it == ranks_.end() || --it->second.waiting_on > 0) continue;
    // Its held lines, in order: one that folds makes it wait again, and the rest are held
    // again behind it.
    auto held = std::move(it->second.held);
    it->second.held.clear();
    for (const auto& line : held) add(fd, line.mode, rank, line.host, line.prefix, line.text, out);
    if (auto again = ranks_.find({fd, rank});
        again != ranks_.end() && again->second.waiting_on == 0 && again->second.held.empty()) {
      ranks_.erase(again);
    }
  }
}

std::string ConsoleFold::summary(Group& group) const {
  std::sort(group.folded.begin(), group.folded.end());
  std::string out = group.folded.size() == 1 ? fmt::format("[rank {}", group.folded.front())
                                             : "[ranks " + format_rank_ranges(group.folded);
  if (group.hosts.size() == 1) {
    out += " on " + *group.hosts.begin();
  } else if (group.hosts.size() > 1) {
    out += fmt::format(" on {} hosts", group.hosts.size());
  }
  out += "] the same: ";
  std::size_t at = 0;
  for (std::size_t n = 0; n < group.spans.size(); ++n) {
    const auto& span = group.spans[n];
    const auto& r = group.ranges[n];
    out.append(group.text, at, span.pos - at);
    if (r.low_text == r.high_text) {
      out += r.low_text;
    } else {
      out += r.low_text;
      out += r.low < 0 || r.high < 0 ? " to " : "-";
      out += r.high_text;
    }
    at = span.pos + span.size;
  }
  out.append(group.text, at);
  out += '\n';
  return out;
}

void ConsoleFold::arm_timer() {
  if (timer_armed_ || expiries_.empty()) return;
  timer_armed_ = true;
  timer_.expires_at(expiries_.front().when);
  timer_.async_wait([this](boost::system::error_code ec) {
    // Cancelled by flush(), which disarmed it, or by the destructor, which leaves nothing to
    // touch. A wait that had already completed when flush() cancelled it runs with success
    // and finds nothing due.
    if (ec) return;
    timer_armed_ = false;
    on_timer();
  });
}

void ConsoleFold::on_timer() {
  const auto now = std::chrono::steady_clock::now();
  while (!expiries_.empty() && expiries_.front().when <= now) {
    const auto expiry = std::move(expiries_.front());
    expiries_.pop_front();
    auto it = groups_.find(expiry.key);
    if (it == groups_.end() || it->second.id != expiry.id) continue;  // ended earlier
    Group ended = std::move(it->second);
    groups_.erase(it);
    std::string out;
    end_group(ended, out);
    if (!out.empty()) write_(ended.fd, out);
  }
  arm_timer();
}

void ConsoleFold::flush() {
  // Released lines may fold again, into groups that this loop ends in turn; each round ends
  // at least one group that folded a line, and lines only come from what was held.
  while (!expiries_.empty()) {
    const auto expiry = std::move(expiries_.front());
    expiries_.pop_front();
    auto it = groups_.find(expiry.key);
    if (it == groups_.end() || it->second.id != expiry.id) continue;
    Group ended = std::move(it->second);
    groups_.erase(it);
    std::string out;
    end_group(ended, out);
    if (!out.empty()) write_(ended.fd, out);
  }
  // Nothing left to wait for: an io_context that runs out of work may end.
  if (timer_armed_) {
    timer_.cancel();
    timer_armed_ = false;
  }
}

}  // namespace ddprun
