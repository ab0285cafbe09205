#pragma once
// Parsers for the values of individual launcher flags. Each takes the text as the user wrote
// it and a `label` saying where it came from ("--nnodes" or "PET_NNODES"); on bad input it
// throws ConfigError with a one-line message of the form "<label>=<text>: <what is wrong>".
// They are pure functions (no environment, no devices), so the CLI stays unit-testable.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/launch_config.hpp"

namespace ddprun {

// "N" or "MIN:MAX" with 0 < MIN <= MAX. Returns {min, max}.
std::pair<int, int> parse_nnodes(std::string_view text, std::string_view label);

// An integer in [min_value, INT_MAX].
int parse_int_at_least(std::string_view text, std::string_view label, int min_value);

// An IPv4 or IPv6 address as digits ("[::1]" taken without its brackets).
std::string parse_ip_address(std::string_view text, std::string_view label);

// A TCP port, 0..65535.
std::uint16_t parse_port(std::string_view text, std::string_view label);

// A duration in seconds, possibly fractional ("0.5"), finite and >= 0 (> 0 when
// `allow_zero` is false). Rounded to milliseconds.
std::chrono::milliseconds parse_seconds(std::string_view text, std::string_view label,
                                        bool allow_zero = true);

// torchrun's -r/-t value: "0".."3" for every rank, or "rank:value,rank:value" (any number of
// digits in the rank, unlike torchrun). A rank may appear once.
StdSpec parse_std_spec(std::string_view text, std::string_view label);

// "k=v,k=v". Known keys are converted (timeouts in seconds, may be fractional); `timeout` is
// an alias of `join_timeout`, which wins when both are given; unknown keys go to `extra`.
// Empty items (a trailing comma) are skipped.
RdzvConf parse_rdzv_conf(std::string_view text, std::string_view label,
                         std::vector<std::string>* unknown_keys = nullptr);

// "SIGTERM,SIGINT": names (with or without the SIG prefix) of the signals ddprun forwards.
// Returns their numbers in the order given, without duplicates.
std::vector<int> parse_signals(std::string_view text, std::string_view label);

// "0,2,3": local ranks >= 0, returned sorted and without duplicates.
std::vector<int> parse_rank_list(std::string_view text, std::string_view label);

// torchrun's --duplicate-*-filters: substrings separated by commas, ",," standing for a comma
// within one. Empty items are dropped; spaces are kept (they may be what is looked for).
std::vector<std::string> parse_filter_list(std::string_view text);

// One of `allowed`; returns the text trimmed.
std::string parse_choice(std::string_view text, std::string_view label,
                         const std::vector<std::string_view>& allowed);

// Checks a ddprun log line prefix: placeholders {rank} {local_rank} {node} {host} {role}
// {time}; "{{" and "}}" stand for literal braces (fmt syntax, which the agent expands).
std::string validate_log_line_prefix(std::string_view text, std::string_view label);

// Converts torchrun's string.Template prefix to ddprun's syntax: $rank, $local_rank and
// $role_name (or ${...}) become {rank}, {local_rank} and {role}, "$$" a "$", and everything else
// stays text as torchrun's safe_substitute leaves it (any other placeholder, a stray "$"), with
// its braces doubled. Never fails; `label` is kept for the callers' uniform shape.
std::string convert_log_line_prefix_template(std::string_view text, std::string_view label);

// A random run id shaped like a UUID4 ("3f2b9c1e-...-..."), as torchrun's --standalone uses.
std::string random_run_id();

}  // namespace ddprun
