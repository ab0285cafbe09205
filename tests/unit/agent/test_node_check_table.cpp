// The node check's table, as the command of a --hosts job prints it: a row per node, the
// findings under them, and a bounded size however many nodes the job has.

#include <catch2/catch.hpp>

#include "agent/node_check_table.hpp"
#include "testing/test_util.hpp"
#include "unit/agent/healthy_probe.hpp"

using namespace ddprun;
using namespace ddprun::test;
using Catch::Matchers::Contains;

namespace {

// A healthy node whose program directory has less room than its log directory.
NodeProbe node(int n) {
  auto p = healthy(n);
  p.dirs[1].free_bytes = 20 * kGiB;
  return p;
}

LinkFigures link(int from, int to, double megabytes_per_second, double rtt_ms) {
  LinkFigures l;
  l.from = from;
  l.to = to;
  l.bytes = static_cast<std::uint64_t>(megabytes_per_second * 1e6);
  l.seconds = 1;
  l.rtt_seconds = rtt_ms / 1e3;
  return l;
}

// The table's line that starts with this node's number and host.
std::string row_of(const std::string& table, int n) {
  const auto start = table.find("\n  " + std::to_string(n) + "  ");
  REQUIRE(start != std::string::npos);
  return table.substr(start + 1, table.find('\n', start + 1) - start - 1);
}

}  // namespace

TEST_CASE("node check table: a row per node with its figures, and the findings under it",
          "[node_check]") {
  std::vector<NodeProbe> nodes{node(0), node(1), node(2)};
  nodes[2].dirs[0].error = "Read-only file system";
  nodes[1].dirs[1].error = "Read-only file system";  // a read-only image: its room is the log's
  nodes[1].open_files = 512;
  const std::vector<LinkFigures> links{link(0, 1, 600, 0.05), link(1, 2, 500, 0.04),
                                       link(2, 0, 12, 2.5)};
  const std::vector<Finding> findings{{1, "host1", "ulimit -n is 512 (at least 1024 needed)"},
                                      {2, "host2", "program directory /job: not writable"}};
  const auto table = format_node_check_table(nodes, findings, links, 0.84);
  INFO(table);
  CHECK(table.starts_with("Node check: 3 nodes, 2 findings (0.84 s):\n"));
  CHECK_THAT(table, Contains("/dev/shm free"));
  // Node 0: its least room, its limits, its fastest link out and in, its shortest round trip.
  const auto zero = row_of(table, 0);
  CHECK_THAT(zero, Contains("host0"));
  CHECK_THAT(zero, Contains("20 GiB"));
  CHECK_THAT(zero, Contains("65536"));
  CHECK_THAT(zero, Contains("unlimited"));
  CHECK_THAT(zero, Contains("600 MB/s"));
  CHECK_THAT(zero, Contains("12 MB/s"));
  CHECK_THAT(zero, Contains("0.05 ms"));
  CHECK_FALSE(zero.ends_with("finding"));
  CHECK_THAT(row_of(table, 1), Contains(" 512 "));
  CHECK(row_of(table, 1).ends_with("1 finding"));
  CHECK_THAT(row_of(table, 1), Contains("50 GiB"));
  CHECK_THAT(row_of(table, 2), Contains("not writable"));
  CHECK_THAT(table, Contains("  links: median 500 MB/s, round trip 0.05 ms\n"));
  CHECK_THAT(table, Contains("\n  node 1 (host1): ulimit -n is 512 (at least 1024 needed)\n"));
  CHECK_THAT(table, Contains("\n  node 2 (host2): program directory /job: not writable\n"));
}

TEST_CASE("node check table: nothing found, and no links measured", "[node_check]") {
  const auto table = format_node_check_table({node(0), node(1)}, {}, {}, 0.2);
  INFO(table);
  CHECK(table.starts_with("Node check: 2 nodes, nothing found (0.20 s):\n"));
  CHECK(count_of(table, "\n") == 4);  // the title, the column heads, two nodes
  CHECK(row_of(table, 1).ends_with("-"));  // no round trip
}

TEST_CASE("node check table: many nodes show only those named, and the findings are bounded",
          "[node_check]") {
  std::vector<NodeProbe> nodes;
  std::vector<Finding> findings;
  for (int n = 0; n < 1000; ++n) nodes.push_back(node(n));
  // Node 7 once, then node 900 more times than the table shows.
  findings.push_back({7, "host7", "ulimit -u is 100 (at least 1024 needed)"});
  for (std::size_t i = 0; i < kTableFindings + 5; ++i) {
    findings.push_back({900, "host900", "link to node " + std::to_string(i) + ": slow"});
  }
  const auto table = format_node_check_table(nodes, findings, {}, 3);
  INFO(table);
  CHECK(table.starts_with("Node check: 1000 nodes, 38 findings (3.00 s):\n"));
  CHECK(row_of(table, 7).ends_with("1 finding"));
  CHECK(row_of(table, 900).ends_with("37 findings"));
  CHECK(table.find("\n  8  ") == std::string::npos);
  CHECK_THAT(table, Contains("\n  998 other node(s): nothing found\n"));
  CHECK(count_of(table, " (host") == kTableFindings);  // "node 7 (host7): ..."
  CHECK_THAT(table, Contains("and 6 more (every node's events file has them: node_check)"));
  // One report line carries it, far under the longest line the command reads (1 MiB).
  CHECK(table.size() < 8 * 1024);
  // A setting wrong on every node names every node: still one row each for the first 32.
  findings.clear();
  for (int n = 0; n < 1000; ++n) findings.push_back({n, nodes[n].host, "ulimit -u is 100"});
  const auto all_named = format_node_check_table(nodes, findings, {}, 3);
  INFO(all_named);
  CHECK(count_of(all_named, "  1 finding\n") == kTableAllRowsUpTo);
  CHECK_THAT(all_named, Contains("\n  and 968 more node(s) named\n  0 other node(s): nothing "
                                 "found\n"));
  CHECK(all_named.size() < 8 * 1024);
}
