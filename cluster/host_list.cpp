#include "cluster/host_list.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <map>
#include <memory>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun {
namespace {

constexpr int kMaxSlots = 1'000'000;
// A hostfile of a million hosts is about 20 MB; the limit only stops /dev/zero and mistakes.
constexpr std::size_t kMaxHostfileBytes = 64u << 20;
constexpr std::string_view kExpectedLine = "expected 'host', 'host slots=N' or 'host:N'";
constexpr std::string_view kSlotsField = "slots=";

// What is wrong with one piece of a host entry. The callers add where it was (an item of
// --hosts, a line of a file), so the helpers below need not know.
struct BadEntry {
  std::string why;
};

[[noreturn]] void bad(std::string why) { throw BadEntry{std::move(why)}; }

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A character as a user can read it in a one-line message.
std::string printable(char c) {
  auto u = static_cast<unsigned char>(c);
  if (std::isprint(u) != 0) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x}", u);
}

// User text echoed in a message, control bytes escaped: the message stays on one line, and a
// NUL would end what() there.
std::string shown(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

// The canonical text of an IPv6 address with an optional "%zone", or nullopt when the text is
// not one. Two spellings of the same address ("::1", "0::1") are the same host.
std::optional<std::string> canonical_ipv6(std::string_view text) {
  auto percent = text.find('%');
  std::string address(text.substr(0, percent));
  in6_addr bytes{};
  if (inet_pton(AF_INET6, address.c_str(), &bytes) != 1) return std::nullopt;
  std::string zone;
  if (percent != std::string_view::npos) {
    zone = std::string(text.substr(percent + 1));
    bool zone_ok = !zone.empty() && std::all_of(zone.begin(), zone.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_';
    });
    if (!zone_ok) return std::nullopt;
  }
  char out[INET6_ADDRSTRLEN] = "";
  inet_ntop(AF_INET6, &bytes, out, sizeof(out));
  return zone.empty() ? std::string(out) : fmt::format("{}%{}", out, zone);
}

// Slots are written as plain digits: no sign, no spaces, no hex; 0 and huge counts are typos.
int parse_slots(std::string_view text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), is_digit)) {
    bad("slots must be an integer >= 1");
  }
  auto value = parse_int(text);  // nullopt only on overflow, the text being all digits
  if (!value || *value > kMaxSlots) bad(fmt::format("slots must be at most {}", kMaxSlots));
  if (*value < 1) bad("slots must be an integer >= 1");
  return static_cast<int>(*value);
}

// A host name or an IPv4 address, unbracketed. The name ends up as an argument of ssh, so only
// the characters of DNS names (and '_', which ssh aliases use) are let through, and never a
// leading '-' that ssh would read as an option.
void check_name(std::string_view name) {
  if (name.empty()) bad("empty host name");
  if (name.front() == '-') bad("a host name must not start with '-'");
  if (std::any_of(name.begin(), name.end(), is_space)) {
    bad("a host name must not contain whitespace");
  }
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '.' && c != '-' && c != '_') {
      bad(fmt::format("a host name must not contain {} (letters, digits, '.', '-' and '_' only)",
                      printable(c)));
    }
  }
  // Digits and dots only: ssh would take it as an address, so it must be a whole valid one
  // ("10.0.0.300" and "10.0.1" are typos, not names).
  bool numeric =
      std::all_of(name.begin(), name.end(), [](char c) { return is_digit(c) || c == '.'; });
  in_addr bytes{};
  if (numeric && inet_pton(AF_INET, std::string(name).c_str(), &bytes) != 1) {
    bad(fmt::format("'{}' is not a valid IPv4 address", name));
  }
}

// One entry: "host", "host:N", "[v6]" or "[v6]:N", already trimmed.
HostSpec parse_entry(std::string_view entry) {
  HostSpec spec;
  if (!entry.empty() && entry.front() == '[') {
    auto close = entry.find(']');
    if (close == std::string_view::npos) bad("missing ']' after the IPv6 address");
    auto address = entry.substr(1, close - 1);
    auto rest = entry.substr(close + 1);
    if (address.empty()) bad("empty IPv6 address in brackets");
    if (!canonical_ipv6(address)) bad(fmt::format("'{}' is not an IPv6 address", address));
    spec.host = std::string(address);
    if (rest.empty()) return spec;
    if (rest.front() != ':') bad("unexpected text after ']' (expected ':N' or nothing)");
    spec.slots = parse_slots(rest.substr(1));
    return spec;
  }
  auto colon = entry.find(':');
  if (colon != std::string_view::npos && entry.find(':', colon + 1) != std::string_view::npos) {
    // "fe80::1:2" could be an address with 2 slots or an address ending in :2.
    bad("more than one ':'; write an IPv6 address in brackets, as in [::1] or [::1]:2");
  }
  auto name = entry.substr(0, colon);
  check_name(name);
  spec.host = std::string(name);
  if (colon != std::string_view::npos) spec.slots = parse_slots(entry.substr(colon + 1));
  return spec;
}

// The same host written twice is found whatever its spelling: names are case-insensitive
// (DNS), IPv6 addresses have several spellings.
std::string host_key(const std::string& host) {
  if (auto v6 = canonical_ipv6(host)) return *v6;
  std::string key = host;
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return key;
}

// ", as gpu01" when the earlier listing was spelled differently, so the user can find it.
std::string other_spelling(const std::string& first, const std::string& again) {
  return first == again ? std::string() : fmt::format(", as {}", first);
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    std::size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

// One non-blank hostfile line, comment removed. Errors come back as "<why>", with the piece of
// the line that is wrong in parentheses when the why alone would not point at it.
HostSpec parse_hostfile_line(std::string_view line) {
  auto fields = words(line);
  HostSpec spec;
  try {
    spec = parse_entry(fields[0]);
  } catch (const BadEntry& e) {
    bad(fmt::format("{} ({})", e.why, shown(fields[0])));
  }
  bool slots_field_seen = false;
  for (std::size_t i = 1; i < fields.size(); ++i) {
    auto field = fields[i];
    if (!field.starts_with(kSlotsField)) {
      bad(fmt::format("unknown field '{}' ({})", shown(field), kExpectedLine));
    }
    if (slots_field_seen) bad("'slots=' is given twice");
    if (spec.slots) {
      bad(fmt::format("slots given twice, as '{}' and '{}'", shown(fields[0]), shown(field)));
    }
    slots_field_seen = true;
    try {
      spec.slots = parse_slots(field.substr(kSlotsField.size()));
    } catch (const BadEntry& e) {
      bad(fmt::format("{} ({})", e.why, shown(field)));
    }
  }
  return spec;
}

// Slurm's hostlist syntax.
[[noreturn]] void bad_hostlist(std::string_view what, std::string_view text, std::string_view why) {
  throw ConfigError(fmt::format("{}={}: {}", what, text, why));
}

// The numbers of one bracket group ("01-04,07"), as text with the padding they ask for.
std::vector<std::string> expand_ranges(std::string_view ranges, std::string_view what,
                                       std::string_view text) {
  std::vector<std::string> out;
  for (const auto& part : split(ranges, ',')) {
    const auto dash = part.find('-');
    const std::string lo_text = part.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : part.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() <= 18 &&
             s.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(lo_text) || !digits(hi_text)) {
      bad_hostlist(what, text, fmt::format("'{}' is not a number or a range N-M", part));
    }
    const auto lo = std::stoll(lo_text);
    const auto hi = std::stoll(hi_text);
    if (hi < lo) bad_hostlist(what, text, fmt::format("range '{}' runs backwards", part));
    if (hi - lo >= 1'000'000) bad_hostlist(what, text, fmt::format("range '{}' is too large", part));
    const auto width = lo_text.size();
    for (auto i = lo; i <= hi; ++i) out.push_back(fmt::format("{:0{}}", i, width));
  }
  return out;
}

// One name with any number of bracket groups: their cartesian product, the first group
// varying slowest.
std::vector<std::string> expand_name(std::string_view name, std::string_view what,
                                     std::string_view text) {
  std::vector<std::string> names{""};
  std::size_t at = 0;
  while (at < name.size()) {
    const auto open = name.find('[', at);
    const auto literal = name.substr(at, open == std::string_view::npos ? name.npos : open - at);
    if (literal.find(']') != std::string_view::npos) bad_hostlist(what, text, "']' without '['");
    if (at > 0 && open == std::string_view::npos && !literal.empty()) {
      // As Slurm's own parser: a name may not go on after its last bracket group.
      bad_hostlist(what, text, fmt::format("'{}' follows the last bracket group", literal));
    }
    for (auto& n : names) n += literal;
    if (open == std::string_view::npos) break;
    const auto close = name.find(']', open);
    if (close == std::string_view::npos) bad_hostlist(what, text, "'[' without ']'");
    const auto inner = name.substr(open + 1, close - open - 1);
    if (inner.empty() || inner.find('[') != std::string_view::npos) {
      bad_hostlist(what, text, fmt::format("bad bracket group '[{}]'", inner));
    }
    const auto numbers = expand_ranges(inner, what, text);
    std::vector<std::string> next;
    next.reserve(names.size() * numbers.size());
    for (const auto& n : names) {
      for (const auto& number : numbers) next.push_back(n + number);
    }
    names = std::move(next);
    at = close + 1;
  }
  return names;
}

}  // namespace

std::vector<HostSpec> parse_hosts(std::string_view text, std::string_view label) {
  auto fail = [&](const std::string& why) {
    return ConfigError(fmt::format("{}={}: {}", label, shown(text), why));
  };
  if (trim(text).empty()) throw fail("no host given");
  auto items = split(text, ',');
  std::vector<HostSpec> hosts;
  std::map<std::string, std::size_t> index_of;  // host key -> index in hosts
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto item = trim(items[i]);
    if (item.empty()) throw fail(fmt::format("empty host entry (item {})", i + 1));
    HostSpec spec;
    try {
      spec = parse_entry(item);
    } catch (const BadEntry& e) {
      throw fail(fmt::format("{} (item {}: {})", e.why, i + 1, shown(item)));
    }
    auto [it, inserted] = index_of.emplace(host_key(spec.host), i);
    if (!inserted) {
      const auto& first = hosts[it->second];
      throw fail(fmt::format("host {} is listed twice (items {} and {}{})", spec.host,
                             it->second + 1, i + 1, other_spelling(first.host, spec.host)));
    }
    hosts.push_back(std::move(spec));
  }
  return hosts;
}

std::vector<HostSpec> parse_hostfile(std::string_view text, std::string_view file_name) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";  // some Windows editors start with one
  if (text.starts_with(kBom)) text.remove_prefix(kBom.size());
  auto lines = split(text, '\n');
  std::vector<HostSpec> hosts;
  std::map<std::string, std::size_t> line_of;  // host key -> index in hosts
  std::vector<std::size_t> host_line;          // index in hosts -> line number
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::size_t line_number = i + 1;
    std::string_view line = lines[i];
    line = trim(line.substr(0, line.find('#')));  // trim also drops the '\r' of CRLF files
    if (line.empty()) continue;
    HostSpec spec;
    try {
      spec = parse_hostfile_line(line);
    } catch (const BadEntry& e) {
      throw ConfigError(fmt::format("{}:{}: {}", shown(file_name), line_number, e.why));
    }
    auto [it, inserted] = line_of.emplace(host_key(spec.host), hosts.size());
    if (!inserted) {
      const auto& first = hosts[it->second];
      throw ConfigError(fmt::format("{}:{}: host {} is listed twice (first on line {}{})",
                                    shown(file_name), line_number, spec.host, host_line[it->second],
                                    other_spelling(first.host, spec.host)));
    }
    hosts.push_back(std::move(spec));
    host_line.push_back(line_number);
  }
  if (hosts.empty()) throw ConfigError(fmt::format("{}: no host in the file", shown(file_name)));
  return hosts;
}

std::vector<HostSpec> read_hostfile(const std::string& path) {
  auto cannot_read = [&](int err) {
    return ConfigError(
        fmt::format("cannot read the hostfile {}: {}", shown(path), errno_message(err)));
  };
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw cannot_read(errno);
  std::string text;
  char buffer[1 << 16];
  while (true) {
    std::size_t n = std::fread(buffer, 1, sizeof(buffer), file.get());
    if (n == 0) break;
    if (text.size() + n > kMaxHostfileBytes) {
      throw ConfigError(fmt::format("cannot read the hostfile {}: larger than {} MiB", shown(path),
                                    kMaxHostfileBytes >> 20));
    }
    text.append(buffer, n);
  }
  // A directory opens fine and fails on the first read (EISDIR).
  if (std::ferror(file.get()) != 0) throw cannot_read(errno);
  return parse_hostfile(text, path);
}

std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what) {
  std::vector<std::string> hosts;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) bad_hostlist(what, text, "unbalanced brackets");
    if (c == ',' && depth == 0) {
      const auto name = text.substr(start, i - start);
      if (name.empty()) bad_hostlist(what, text, "an empty host name");
      if (name.find_first_of(" \t\n") != std::string_view::npos) {
        bad_hostlist(what, text, "a host name with white space");
      }
      for (auto& h : expand_name(name, what, text)) hosts.push_back(std::move(h));
      start = i + 1;
    }
  }
  if (depth != 0) bad_hostlist(what, text, "unbalanced brackets");
  return hosts;
}

}  // namespace ddprun
