#pragma once
// Small string helpers shared by the parsers.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

std::vector<std::string> split(std::string_view text, char sep);
std::string_view trim(std::string_view text);
// An argument as a POSIX shell needs it written: as it is when it has only safe characters,
// else in single quotes ('it'\''s' for an embedded quote).
std::string shell_quote(std::string_view arg);
// A command line as a shell would need it typed: the arguments quoted, joined by spaces.
std::string shell_join(const std::vector<std::string>& argv);
// Words as a POSIX shell splits them: whitespace separates, '...' and "..." group (backslash
// escapes inside "..." and outside quotes). No expansion. Throws ConfigError naming `what` for
// an unterminated quote.
std::vector<std::string> split_words(std::string_view text, std::string_view what);
// Text to stand as itself where "{name}" is a placeholder (fmt's syntax, a --log-line-prefix):
// each brace doubled.
std::string double_braces(std::string_view text);

// Bytes (a path, an environment value, an argument: not necessarily UTF-8) as UTF-8 text that
// JSON can carry, each byte one character (its Latin-1 reading: ASCII stays as it is), and back.
// bytes_from_utf8 throws Error for text that bytes_to_utf8 cannot have written.
std::string bytes_to_utf8(std::string_view bytes);
std::string bytes_from_utf8(std::string_view text);

// Strict integer parsing: the whole text must be a number in range, else nullopt.
std::optional<std::int64_t> parse_int(std::string_view text);
// Strict floating-point parsing.
std::optional<double> parse_double(std::string_view text);
// "1", "true", "yes", "on" / "0", "false", "no", "off" (case-insensitive).
std::optional<bool> parse_bool(std::string_view text);

// A host and a port, as written by a user: "host", "host:port", "[v6]:port", "[v6]".
struct HostPort {
  std::string host;  // without brackets
  std::optional<std::uint16_t> port;
};
// Throws ConfigError naming `what` when the text is not a host with an optional valid port.
HostPort parse_host_port(std::string_view text, std::string_view what);
// "host:port", with brackets around IPv6 literals.
std::string format_host_port(const std::string& host, std::uint16_t port);

}  // namespace ddprun
