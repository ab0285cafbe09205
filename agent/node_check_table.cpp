#include "agent/node_check_table.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace ddprun {

namespace {

std::string count_of(std::size_t n, const char* one) {
  return fmt::format("{} {}{}", n, one, n == 1 ? "" : "s");
}

// The least room among the directories the job writes to, or the first that does not answer,
// or the log directory when it is not writable (a read-only program directory is how some jobs
// are set up: the findings say when it is not).
std::string room_text(const NodeProbe& n) {
  std::string room = "-";
  std::uint64_t least = kUnlimited;
  for (const auto& d : n.dirs) {
    if (d.timed_out) return "no answer";
    if (!d.error.empty() && d.role == kLogDirectory) return "not writable";
    if (!d.error.empty()) continue;
    if (d.needs_room && d.free_bytes < least) {
      least = d.free_bytes;
      room = format_bytes(least);
    }
  }
  return room;
}

// A node's fastest link out (as its receiver measured it), fastest in, and shortest round trip.
struct NodeLinks {
  double out = 0;
  double in = 0;
  double rtt = 0;
};

std::map<int, NodeLinks> links_by_node(const std::vector<LinkFigures>& links) {
  std::map<int, NodeLinks> by;
  for (const auto& l : links) {
    if (!l.error.empty()) continue;
    by[l.from].out = std::max(by[l.from].out, l.bytes_per_second());
    by[l.to].in = std::max(by[l.to].in, l.bytes_per_second());
    if (l.rtt_seconds > 0 && (by[l.from].rtt == 0 || l.rtt_seconds < by[l.from].rtt)) {
      by[l.from].rtt = l.rtt_seconds;
    }
  }
  return by;
}

// Columns padded to their widest cell; the first two (node, host) to the left, the figures to
// the right, the last (what was found) as it is.
std::string align(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c + 1 == row.size()) {
        line += "  " + row[c];
      } else if (c < 2) {
        line += fmt::format("  {:<{}}", row[c], width[c]);
      } else {
        line += fmt::format("  {:>{}}", row[c], width[c]);
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string format_node_check_table(const std::vector<NodeProbe>& nodes,
                                    const std::vector<Finding>& findings,
                                    const std::vector<LinkFigures>& links, double seconds) {
  std::map<int, std::size_t> named;
  for (const auto& f : findings) ++named[f.node];
  std::string out = fmt::format("Node check: {}, {} ({:.2f} s):\n", count_of(nodes.size(), "node"),
                                findings.empty() ? "nothing found" : count_of(findings.size(),
                                                                              "finding"),
                                seconds);
  const bool every_row = nodes.size() <= kTableAllRowsUpTo;
  const auto measured = links_by_node(links);
  // A column for the GPUs where a node has a driver to ask: a CPU cluster's table has none.
  const bool gpu_column = std::any_of(nodes.begin(), nodes.end(),
                                      [](const NodeProbe& n) { return n.gpus.skipped.empty(); });
  std::vector<std::vector<std::string>> rows{{"node", "host", "/dev/shm free", "room",
                                              "ulimit -n", "-l", "-u", "link out", "in",
                                              "round trip", ""}};
  if (gpu_column) rows.front().insert(rows.front().begin() + 7, "GPUs");
  std::size_t named_rows = 0;
  for (const auto& n : nodes) {
    const auto found = named.find(n.node);
    if (!every_row && (found == named.end() || ++named_rows > kTableAllRowsUpTo)) continue;
    const auto l = measured.find(n.node);
    auto rate = [&](double NodeLinks::*field) {
      return l != measured.end() && l->second.*field > 0 ? format_rate(l->second.*field)
                                                         : std::string("-");
    };
    rows.push_back({std::to_string(n.node), n.host,
                    n.has_shm ? format_bytes(n.shm_free_bytes) : "-", room_text(n),
                    format_limit(n.open_files, false), format_limit(n.locked_bytes, true),
                    format_limit(n.processes, false), rate(&NodeLinks::out), rate(&NodeLinks::in),
                    l != measured.end() && l->second.rtt > 0 ? format_millis(l->second.rtt) : "-",
                    found == named.end() ? "" : count_of(found->second, "finding")});
    if (gpu_column) rows.back().insert(rows.back().begin() + 7, gpu_summary(n.gpus));
  }
  if (rows.size() > 1) out += align(rows);
  if (!every_row) {
    if (named.size() > kTableAllRowsUpTo) {
      out += fmt::format("  and {} more node(s) named\n", named.size() - kTableAllRowsUpTo);
    }
    out += fmt::format("  {} other node(s): nothing found\n", nodes.size() - named.size());
  }
  if (auto summary = links_summary(links); !summary.empty()) {
    out += "  " + summary.substr(2) + "\n";  // without its leading "; "
  }
  for (std::size_t i = 0; i < findings.size() && i < kTableFindings; ++i) {
    out += "  " + findings[i].line() + "\n";
  }
  if (findings.size() > kTableFindings) {
    out += fmt::format("  and {} more (every node's events file has them: node_check)\n",
                       findings.size() - kTableFindings);
  }
  return out;
}

}  // namespace ddprun
