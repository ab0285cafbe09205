// The links part of --node-check: the pairings, the rules (judge_links, pure), and real
// measurements between listeners on loopback, alone and through a store.

#include <catch2/catch.hpp>

#include <cmath>
#include <future>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/link_check.hpp"
#include "common/error.hpp"
#include "store/memory_store.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

namespace {

constexpr double kGB = 1e9;

std::vector<NodeProbe> nodes_of(int n) {
  std::vector<NodeProbe> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].node = i;
    out[i].host = "h" + std::to_string(i);
  }
  return out;
}

// Every link of both pairings at `rate` bytes/s and a 50 us round trip.
std::vector<LinkFigures> links_of(int n, double rate = kGB) {
  std::vector<LinkFigures> out;
  for (int p = 0; p < link_pairings(n); ++p) {
    for (int i = 0; i < n; ++i) {
      LinkFigures l;
      l.from = i;
      l.to = link_target(i, n, p);
      l.pairing = p;
      l.rtt_seconds = 50e-6;
      l.bytes = 4 << 20;
      l.seconds = static_cast<double>(l.bytes) / rate;
      out.push_back(l);
    }
  }
  return out;
}

void set_rate(LinkFigures& l, double rate) { l.seconds = static_cast<double>(l.bytes) / rate; }

// `n` nodes on loopback, each with a listener of its own in `checks`.
std::vector<NodeProbe> listening_nodes(int n, std::vector<std::unique_ptr<LinkCheck>>& checks) {
  auto nodes = nodes_of(n);
  for (auto& node : nodes) {
    checks.push_back(std::make_unique<LinkCheck>());
    node.host = "127.0.0.1";
    node.link_port = checks.back()->port();
  }
  return nodes;
}

std::vector<std::string> lines(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const auto& f : findings) out.push_back(f.line());
  return out;
}

}  // namespace

TEST_CASE("link check: each pairing sends to one node and takes from one, and the second "
          "differs from the ring", "[node_check][links]") {
  CHECK(link_pairings(1) == 0);
  CHECK(link_pairings(2) == 1);
  CHECK(link_pairings(3) == 2);
  CHECK(link_target(0, 2, 1) == -1);
  for (int n = 2; n <= 70; ++n) {
    std::set<std::pair<int, int>> seen;
    for (int p = 0; p < link_pairings(n); ++p) {
      std::set<int> targets;
      for (int i = 0; i < n; ++i) {
        const int t = link_target(i, n, p);
        INFO("n=" << n << " pairing " << p << " node " << i);
        CHECK(t != i);
        CHECK(link_source(t, n, p) == i);
        targets.insert(t);
        seen.insert({i, t});
      }
      CHECK(static_cast<int>(targets.size()) == n);  // every node takes from exactly one
    }
    // Two pairings measure 2n different directed links once there are three nodes.
    if (n >= 3) CHECK(static_cast<int>(seen.size()) == 2 * n);
  }
}

TEST_CASE("link check: equal links name nothing", "[node_check][links]") {
  for (int n : {2, 3, 5, 64}) {
    CHECK(judge_links(links_of(n), nodes_of(n)).empty());
  }
}

TEST_CASE("link check: a node all of whose links are slow is named once, as the node, its "
          "queues' round trips with it", "[node_check][links]") {
  for (int n : {3, 4, 7, 20}) {
    auto links = links_of(n);
    const int bad = n - 2;
    for (auto& l : links) {
      if (l.from == bad || l.to == bad) {
        set_rate(l, 0.1 * kGB);
        if (l.from == bad) l.rtt_seconds = 12e-3;
      }
    }
    INFO("n=" << n);
    CHECK(lines(judge_links(links, nodes_of(n))) ==
          std::vector<std::string>{fmt::format(
              "node {} (h{}): every link to and from it is slow: at most 100 MB/s, the nodes' "
              "median 1.0 GB/s",
              bad, bad)});
    // About the node itself: --node-check=exclude leaves it out.
    CHECK(judge_links(links, nodes_of(n)).front().link_to == -1);
  }
}

TEST_CASE("link check: one slow link between good nodes is named as the link, on its sender",
          "[node_check][links]") {
  auto links = links_of(6);
  for (auto& l : links) {
    if (l.from == 2 && l.to == 3) {
      set_rate(l, 40e6);
      l.cut_short = true;
    }
  }
  const auto findings = judge_links(links, nodes_of(6));
  CHECK(lines(findings) ==
        std::vector<std::string>{"node 2 (h2): link to node 3 (h3): 40 MB/s (cut short), the "
                                 "nodes' median 1.0 GB/s"});
  // A finding about a link, which --node-check=exclude pins on neither of its nodes.
  REQUIRE(findings.size() == 1);
  CHECK(findings[0].link_to == 3);
}

TEST_CASE("link check: the spread of a busy machine is not named", "[node_check][links]") {
  auto links = links_of(8);
  // From half to twice the usual rate, scattered.
  const double factors[] = {0.5, 2, 1, 0.7, 1.5, 0.6, 1.2, 0.9};
  for (std::size_t i = 0; i < links.size(); ++i) set_rate(links[i], factors[i % 8] * kGB);
  CHECK(judge_links(links, nodes_of(8)).empty());
}

TEST_CASE("link check: a node none of whose links carried anything is named as the node",
          "[node_check][links]") {
  auto links = links_of(5);
  for (auto& l : links) {
    if (l.from == 2 || l.to == 2) {
      l.error = l.to == 2 ? "Connection refused" : "nothing arrived within 2 s";
      l.bytes = 0;
      l.rtt_seconds = 0;
    }
  }
  const auto findings = judge_links(links, nodes_of(5));
  CHECK(lines(findings) == std::vector<std::string>{"node 2 (h2): no link to or from it carried "
                                                    "anything: Connection refused"});
  REQUIRE(findings.size() == 1);
  CHECK(findings[0].link_to == -1);
}

TEST_CASE("link check: a link that carried nothing is named on its sender, with two nodes too",
          "[node_check][links]") {
  auto links = links_of(2);
  links[1].error = "Connection refused";
  links[1].bytes = 0;
  CHECK(lines(judge_links(links, nodes_of(2))) ==
        std::vector<std::string>{"node 1 (h1): link to node 0 (h0): Connection refused"});
  // With two nodes there is no median to tell the slow one: a slow link alone is not named.
  auto slow = links_of(2);
  set_rate(slow[0], 1e6);
  CHECK(judge_links(slow, nodes_of(2)).empty());
}

TEST_CASE("link check: round trips far over the median are named, by node or by link",
          "[node_check][links]") {
  auto links = links_of(5);
  for (auto& l : links) {
    if (l.from == 4 || l.to == 4) l.rtt_seconds = 20e-3;
  }
  CHECK(lines(judge_links(links, nodes_of(5))) ==
        std::vector<std::string>{"node 4 (h4): every link to and from it is far: round trips of "
                                 "20 ms or more, the nodes' median 0.05 ms"});
  // Ten times the median, but only a few hundred microseconds: not named.
  auto near = links_of(5);
  near[0].rtt_seconds = 600e-6;
  CHECK(judge_links(near, nodes_of(5)).empty());
  auto one = links_of(5);
  one[0].rtt_seconds = 30e-3;
  CHECK(lines(judge_links(one, nodes_of(5))) ==
        std::vector<std::string>{"node 0 (h0): link to node 1 (h1): round trip 30 ms, the "
                                 "nodes' median 0.05 ms"});
}

TEST_CASE("link check: the links in doubt are those judge_links names as slow or far, by link "
          "or by node, and none that carried nothing", "[node_check][links]") {
  CHECK(links_in_doubt(links_of(6), link_norm(links_of(6), nodes_of(6))).empty());
  auto links = links_of(6);
  const int bad = 4;  // every link slow: the ring's 3->4, 4->5, the second pairing's 1->4, 4->1
  for (auto& l : links) {
    if (l.from == bad || l.to == bad) set_rate(l, 0.05 * kGB);
  }
  links[0].rtt_seconds = 30e-3;  // 0->1, far
  links[2].error = "Connection refused";  // 2->3, carried nothing
  links[2].bytes = 0;
  // 2->5 in the second pairing: twelve times the median, but only 0.55 ms longer.
  links[8].rtt_seconds = 600e-6;
  CHECK(links_in_doubt(links, link_norm(links, nodes_of(6))) ==
        LinkSet{{0, 0}, {0, 3}, {0, 4}, {1, 1}, {1, 4}});
  // Of two nodes there is no median to doubt a link against.
  auto two = links_of(2);
  set_rate(two[0], 1e6);
  CHECK_FALSE(link_norm(two, nodes_of(2)));
  CHECK(links_in_doubt(two, link_norm(two, nodes_of(2))).empty());
}

TEST_CASE("link check: links looked at again are judged against the first look's reference",
          "[node_check][links]") {
  // The first look: every link at 100 MB/s, node 2's at 10 MB/s.
  auto first = links_of(5, 0.1 * kGB);
  for (auto& l : first) {
    if (l.from == 2 || l.to == 2) set_rate(l, 0.01 * kGB);
  }
  const auto norm = link_norm(first, nodes_of(5));
  REQUIRE(norm);
  CHECK(norm->rate_median == Approx(0.1 * kGB));
  CHECK(links_in_doubt(first, norm).size() == 4);
  // Looked at again with nothing else running, node 2's links come out ten times faster than
  // the first look's; every node is on one of them, so against the figures' own median every
  // other link would be slow.
  auto best = first;
  for (auto& l : best) {
    if (l.from == 2 || l.to == 2) set_rate(l, kGB);
  }
  CHECK(judge_links(best, nodes_of(5), norm).empty());
  CHECK(judge_links(best, nodes_of(5)).size() == 6);
}

TEST_CASE("link check: a link looked at again keeps the better of its looks, each figure with "
          "its own", "[node_check][links]") {
  auto best = links_of(4);  // 1 GB/s and 50 us each
  std::vector<LinkFigures> again{best[1], best[5], best[6]};
  set_rate(again[0], 2 * kGB);  // ring 1->2: faster, and a longer round trip
  again[0].rtt_seconds = 80e-6;
  again[0].clock_offset_seconds = 0.5;
  set_rate(again[1], 0.5 * kGB);  // second pairing 1->3: slower, a shorter round trip
  again[1].rtt_seconds = 20e-6;
  again[1].clock_offset_seconds = 0.25;
  again[2].error = "Connection refused";  // second pairing 2->0: this look failed
  again[2].bytes = 0;
  const auto first = best;
  keep_better(best, again);
  CHECK(best[1].bytes_per_second() == Approx(2 * kGB));
  CHECK(best[1].rtt_seconds == Approx(50e-6));
  CHECK(best[1].clock_offset_seconds == 0);
  CHECK(best[5].bytes_per_second() == Approx(kGB));
  CHECK(best[5].rtt_seconds == Approx(20e-6));
  CHECK(best[5].clock_offset_seconds == Approx(0.25));
  CHECK(to_json(best[6]) == to_json(first[6]));
  for (std::size_t k : {0, 2, 3, 4, 7}) CHECK(to_json(best[k]) == to_json(first[k]));
}

TEST_CASE("link check: a clock off from the others is named against their median, or against "
          "node 0's with two nodes", "[node_check][links]") {
  // Node `off`'s clock runs `by` seconds ahead: the links into it see it ahead, out of it behind.
  auto skewed = [](int n, int off, double by) {
    auto links = links_of(n);
    for (auto& l : links) {
      if (l.to == off) l.clock_offset_seconds = by;
      if (l.from == off) l.clock_offset_seconds = -by;
    }
    return links;
  };
  CHECK(judge_clocks(links_of(5), nodes_of(5)).empty());
  CHECK(judge_clocks(skewed(5, 3, 0.9), nodes_of(5)).empty());
  CHECK(lines(judge_clocks(skewed(5, 3, 60), nodes_of(5))) ==
        std::vector<std::string>{"node 3 (h3): its clock is 60.0 s ahead of the nodes' median"});
  // Node 0 off: the median of the others names it, not them.
  const auto zero = judge_clocks(skewed(4, 0, -7.5), nodes_of(4));
  CHECK(lines(zero) ==
        std::vector<std::string>{"node 0 (h0): its clock is 7.5 s behind the nodes' median"});
  REQUIRE(zero.size() == 1);
  CHECK(zero[0].link_to == -1);
  // Of two, and of an even split, the finding is about a pair: exclude pins it on neither.
  const auto two = judge_clocks(skewed(2, 1, 3), nodes_of(2));
  CHECK(lines(two) ==
        std::vector<std::string>{"node 1 (h1): its clock is 3.0 s ahead of node 0's"});
  REQUIRE(two.size() == 1);
  CHECK(two[0].link_to == 0);
  auto split = skewed(4, 1, 30);
  for (auto& l : split) {
    if (l.to == 3) l.clock_offset_seconds += 30;
    if (l.from == 3) l.clock_offset_seconds -= 30;
  }
  const auto halves = judge_clocks(split, nodes_of(4));
  REQUIRE(halves.size() == 2);
  CHECK(halves[0].link_to >= 0);
  CHECK(halves[1].link_to >= 0);
  // Links that carried no ping place no clock; a node whose pings all went out from it is
  // placed by them, the other way round.
  auto broken = skewed(3, 2, 5);
  for (auto& l : broken) {
    if (l.to == 2) l.rtt_seconds = 0;
  }
  CHECK(lines(judge_clocks(broken, nodes_of(3))) ==
        std::vector<std::string>{"node 2 (h2): its clock is 5.0 s ahead of the nodes' median"});
  // Node 0 with no ping at all: nothing to place the others against.
  auto alone = skewed(3, 2, 5);
  for (auto& l : alone) {
    if (l.from == 0 || l.to == 0) l.rtt_seconds = 0;
  }
  CHECK(judge_clocks(alone, nodes_of(3)).empty());
}

TEST_CASE("link check: rates read as link rates are quoted", "[node_check][links]") {
  CHECK(format_rate(94e6) == "94 MB/s");
  CHECK(format_rate(1.1e9) == "1.1 GB/s");
  CHECK(format_rate(512) == "512 B/s");
  CHECK(format_rate(12.5e9) == "12 GB/s");
  CHECK(format_rate(999.97e6) == "1.0 GB/s");
  CHECK(format_rate(9.97e6) == "10 MB/s");
}

TEST_CASE("link check: figures survive JSON, and a foreign report is a protocol error",
          "[node_check][links]") {
  LinkFigures l{3, 7, 1, 1e-4, 1000, 0.5, true, "", -2.5};
  const auto back = link_from_json(to_json(l));
  CHECK(back.clock_offset_seconds == -2.5);
  CHECK(back.from == 3);
  CHECK(back.to == 7);
  CHECK(back.pairing == 1);
  CHECK(back.bytes == 1000);
  CHECK(back.cut_short);
  CHECK(back.bytes_per_second() == Approx(2000));
  CHECK_THROWS_AS(link_from_json(nlohmann::json{{"from", 1}}), ProtocolError);
}

TEST_CASE("link check: two listeners on loopback measure each other", "[node_check][links]") {
  LinkCheck a, b;
  REQUIRE(a.port() != 0);
  REQUIRE(b.port() != 0);
  constexpr std::uint64_t kBytes = 3 << 20;
  // Node 0 sends to node 1 and node 1 to node 0, at once, as in the ring of two.
  auto other = std::async(std::launch::async, [&] {
    return b.run(1, 0, 0, "127.0.0.1", a.port(), 0, kBytes, 20'000ms);
  });
  const auto [to1, from1] = a.run(0, 0, 1, "127.0.0.1", b.port(), 1, kBytes, 20'000ms);
  const auto [to0, from0] = other.get();
  for (const auto* l : {&to1, &from1, &to0, &from0}) {
    INFO(to_json(*l).dump());
    CHECK(l->error.empty());
    CHECK_FALSE(l->cut_short);
  }
  CHECK(to1.rtt_seconds > 0);
  // One machine, one clock: the offset is within the round trip (a generous bound, for load).
  CHECK(std::abs(to1.clock_offset_seconds) <= std::max(to1.rtt_seconds, 0.1));
  CHECK(std::abs(to0.clock_offset_seconds) <= std::max(to0.rtt_seconds, 0.1));
  CHECK(from0.from == 0);
  CHECK(from0.bytes == kBytes);
  CHECK(from0.seconds > 0);
  CHECK(from1.bytes == kBytes);
}

TEST_CASE("link check: a peer that does not listen is an error, and the pairing still ends "
          "in its time", "[node_check][links]") {
  std::uint16_t closed_port = 0;
  {
    LinkCheck gone;
    closed_port = gone.port();
  }
  LinkCheck a;
  const auto started = std::chrono::steady_clock::now();
  const auto [out, in] = a.run(0, 0, 1, "127.0.0.1", closed_port, 1, 1 << 20, 2000ms);
  CHECK(std::chrono::steady_clock::now() - started < 30s);
  CHECK(out.error == "Connection refused");
  CHECK(in.error == "nothing arrived within 2 s");
  CHECK(in.bytes == 0);
}

TEST_CASE("link check: three nodes through a store measure all six links, the same on each",
          "[node_check][links]") {
  store::MemoryStore shared;
  std::vector<std::unique_ptr<LinkCheck>> checks;
  const auto nodes = listening_nodes(3, checks);
  std::vector<std::future<std::vector<LinkFigures>>> runs;
  for (int i = 0; i < 3; ++i) {
    runs.push_back(std::async(std::launch::async, [&, i] {
      return measure_links(shared, "round/0", *checks[i], nodes, i, 1 << 20, Deadline::after(60s))
          .links;
    }));
  }
  std::vector<std::vector<LinkFigures>> seen;
  for (auto& r : runs) seen.push_back(r.get());
  REQUIRE(seen[0].size() == 6);
  std::set<std::pair<int, int>> directed;
  for (const auto& l : seen[0]) {
    INFO(to_json(l).dump());
    CHECK(l.error.empty());
    CHECK(l.bytes == (1u << 20));
    directed.insert({l.from, l.to});
  }
  CHECK(directed.size() == 6);
  for (int i = 1; i < 3; ++i) {
    REQUIRE(seen[i].size() == 6);
    for (std::size_t k = 0; k < 6; ++k) {
      CHECK(to_json(seen[i][k]) == to_json(seen[0][k]));
    }
  }
}

TEST_CASE("link check: a look at some links measures those alone, and every node still "
          "reports and reads all", "[node_check][links]") {
  store::MemoryStore shared;
  std::vector<std::unique_ptr<LinkCheck>> checks;
  const auto nodes = listening_nodes(4, checks);
  // The second pairing's 3->1 alone: nodes 0 and 2 are on none of the look's links.
  const LinkSet only{{1, 3}};
  std::vector<std::future<std::vector<LinkFigures>>> runs;
  for (int i = 0; i < 4; ++i) {
    runs.push_back(std::async(std::launch::async, [&, i] {
      return look_at_links(shared, "round/0", *checks[i], nodes, i, 1 << 20, 1,
                           Deadline::after(60s), only);
    }));
  }
  std::vector<std::vector<LinkFigures>> seen;
  for (auto& r : runs) seen.push_back(r.get());
  for (int i = 0; i < 4; ++i) {
    INFO("node " << i);
    REQUIRE(seen[i].size() == 1);
    const auto& l = seen[i][0];
    INFO(to_json(l).dump());
    CHECK(std::make_tuple(l.pairing, l.from, l.to) == std::make_tuple(1, 3, 1));
    CHECK(l.error.empty());
    CHECK(l.bytes == (1u << 20));
    CHECK(l.rtt_seconds > 0);
    CHECK(to_json(l) == to_json(seen[0][0]));
  }
  // The first pairing, with none of the links, is passed over: no node reported its round.
  CHECK_FALSE(shared.check({"round/0/node_check/links/2/0"}, Deadline::after(5s)));
  CHECK(shared.check({"round/0/node_check/links/3/0"}, Deadline::after(5s)));
}

TEST_CASE("link check: a node that never reports ends the others' wait with a timeout",
          "[node_check][links]") {
  store::MemoryStore shared;
  LinkCheck a, b;
  auto nodes = nodes_of(3);
  nodes[0].host = nodes[1].host = nodes[2].host = "127.0.0.1";
  nodes[0].link_port = a.port();
  nodes[1].link_port = b.port();
  nodes[2].link_port = 0;  // never runs
  auto other = std::async(std::launch::async, [&] {
    try {
      measure_links(shared, "r", b, nodes, 1, 1 << 16, Deadline::after(6s));
      return std::string("no timeout");
    } catch (const TimeoutError& e) {
      return std::string(e.what());
    }
  });
  CHECK_THROWS_WITH(measure_links(shared, "r", a, nodes, 0, 1 << 16, Deadline::after(6s)),
                    Catch::Matchers::StartsWith("--node-check: not every node of 3 reported its "
                                                "links"));
  CHECK_THAT(other.get(), Catch::Matchers::StartsWith("--node-check: not every node of 3"));
}
