#pragma once
// The links part of --node-check: every node sends a bounded amount of data to one other node
// and takes what one other node sends, over TCP between the agents' own addresses, first in a
// ring and then in a second pairing, so that a slow node (every link it is on is slow) is told
// apart from a slow link (one pair). Each pairing's figures go through the store, and reading
// every node's is also the barrier that keeps the next pairing's traffic apart from this one's.
//
// The sender measures the round trip (a few one-byte pings, the shortest: queues and a busy
// machine only add to it) and, from the clock in each answer, the offset of the receiver's wall
// clock from its own; the receiver measures the throughput (the bytes, from its last
// ping's answer to the last byte), so that neither side waits for the other's report over the
// link it measures. When the figures name links as slow or far, those links are looked at again
// (at most kLinkLooks times in all), while the others rest, and each keeps its best: a moment of
// a busy machine slows one look at a link, a slow link every look, and a link looked at again
// does not wait for the job's other links to share the machine and the network with.
//
// judge_links() is pure: every node judges the same figures by the same rules. Thresholds are
// here, as documented in docs/reference.md ("Node checks").

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/node_check.hpp"
#include "common/deadline.hpp"
#include "store/store.hpp"

namespace ddprun {

// Each pairing ends after this long, whatever has arrived: a slow link is measured by what got
// through by then, and a node that does not answer costs no more than this.
inline constexpr std::chrono::milliseconds kLinkPairingTime{2000};
inline constexpr int kLinkPings = 8;
inline constexpr int kLinkLooks = 3;
// A node all of whose links run under this fraction of the nodes' median (LinkNorm) is named;
// a link under it between two nodes that are not, is named as a link. A fifth leaves room for
// the spread of a busy machine; a link slowed to a tenth is past it.
inline constexpr double kLinkFractionOfMedian = 0.2;
// Round trips: named when over this many times the nodes' median, and longer by at least
// kMinLatencyExcess (microseconds of median on a LAN make ten times that still harmless).
inline constexpr double kLatencyFactorOfMedian = 10;
inline constexpr std::chrono::milliseconds kMinLatencyExcess{5};
// A clock further than this from the nodes' median is named: the agents choose the root cause
// of a failure by the failures' wall-clock times across nodes, and people line up the nodes'
// logs by them. NTP keeps machines within milliseconds; a second off is a clock left unset.
inline constexpr std::chrono::milliseconds kMaxClockOffset{1000};

// One direction between two nodes, in one pairing.
struct LinkFigures {
  int from = 0;
  int to = 0;
  int pairing = 0;          // 0: the ring, 1: the second pairing
  double rtt_seconds = 0;   // shortest round trip, as the sender saw it; 0: none measured
  std::uint64_t bytes = 0;  // what the receiver got...
  double seconds = 0;       // ...and how long that took
  bool cut_short = false;   // kLinkPairingTime ran out before every byte arrived
  std::string error;        // why there is no figure (not connected, ended early)
  // The receiver's wall clock minus the sender's, measured on the shortest round trip (good to
  // half of it).
  double clock_offset_seconds = 0;
  double bytes_per_second() const { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0; }
};

// How many pairings a job of `nodes` has (0, 1 for two nodes, else 2), and whom `node` sends to
// and takes from in `pairing`.
int link_pairings(int nodes);
int link_target(int node, int nodes, int pairing);
int link_source(int node, int nodes, int pairing);

// A listener on every address of this machine (a port of the kernel's choice) for the time of
// the check, and the pairings run over it.
class LinkCheck {
 public:
  LinkCheck();
  ~LinkCheck();
  LinkCheck(const LinkCheck&) = delete;
  LinkCheck& operator=(const LinkCheck&) = delete;

  // 0 when no listener could be opened (listen_error() says why): this node can still send.
  std::uint16_t port() const;
  const std::string& listen_error() const;

  // Sends `bytes` to node `target` at host:port and takes what node `source` sends (either may
  // be -1: none), both within `limit`; `round` tells this exchange from an earlier one whose
  // connection may still wait in the backlog. Returns the figures of the link to target (round
  // trip, error) and of the link from source (bytes, seconds, error), `pairing` set to `round`.
  std::pair<LinkFigures, LinkFigures> run(int me, int round, int target,
                                          const std::string& host, std::uint16_t port, int source,
                                          std::uint64_t bytes,
                                          std::chrono::milliseconds limit = kLinkPairingTime);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Links by pairing and sender, which tell the receiver.
using LinkSet = std::set<std::pair<int, int>>;

// One look (numbered from 0) at the links of both pairings for node `me` of `nodes` (their
// hosts and listeners' ports), or, given `only`, at those of them; each pairing with a link to
// look at is followed by an exchange of its figures under "<prefix>/node_check/links", which
// every node writes and reads (waiting for the others until `deadline`). Returns the links'
// figures, the same on every node, pairing by pairing, each pairing's links by sender.
std::vector<LinkFigures> look_at_links(store::Store& store, const std::string& prefix,
                                       LinkCheck& check, const std::vector<NodeProbe>& nodes,
                                       int me, std::uint64_t bytes, int look, Deadline deadline,
                                       const std::optional<LinkSet>& only);

// The job's reference for its links: the median, over the nodes, of each node's fastest link
// and shortest round trip. The median is of every node's best, so that one slow node cannot
// drag it down (it is on four links of the job's 2n).
struct LinkNorm {
  double rate_median = 0;
  double rtt_median = 0;  // 0: no link carried pings
  bool slow(double bytes_per_second) const;
  bool far(double rtt_seconds) const;
};

// The reference these links give; none below three nodes (of two, neither can be told slow
// from the other) or when fewer than three carried anything.
std::optional<LinkNorm> link_norm(const std::vector<LinkFigures>& links,
                                  const std::vector<NodeProbe>& nodes);

struct MeasuredLinks {
  std::vector<LinkFigures> links;  // every directed link's best figures, in look_at_links' order
  // From the first look, when every link of a pairing ran at once: a link looked at again runs
  // with fewer others beside it, and its figure, better for it, must not raise the bar for the
  // rest.
  std::optional<LinkNorm> norm;
};

// Each link of `best` looked at `again` keeps the better of its two looks: the faster, and the
// round trip (with its clock offset) the shorter; a look that failed loses to one that did not.
void keep_better(std::vector<LinkFigures>& best, const std::vector<LinkFigures>& again);

// Every link, looked at once, and then the links in doubt again while there are any, at most
// kLinkLooks looks in all, each link keeping its best figures.
MeasuredLinks measure_links(store::Store& store, const std::string& prefix, LinkCheck& check,
                            const std::vector<NodeProbe>& nodes, int me, std::uint64_t bytes,
                            Deadline deadline);

// The links judge_links would name as slow or far against `norm`, alone or as one of a node's
// links: what a moment of a busy machine can cause. A link that carried nothing is not in doubt.
LinkSet links_in_doubt(const std::vector<LinkFigures>& links,
                       const std::optional<LinkNorm>& norm);

// The findings about these links: a link that carried nothing (on its sender), a node none of
// whose links carried anything or whose every link is slow or far, a link that is slow or far
// between two nodes that are not, against `norm`; without one (two nodes), only links that
// carried nothing are named. The second form takes the reference from `links` themselves.
std::vector<Finding> judge_links(const std::vector<LinkFigures>& links,
                                 const std::vector<NodeProbe>& nodes,
                                 const std::optional<LinkNorm>& norm);
std::vector<Finding> judge_links(const std::vector<LinkFigures>& links,
                                 const std::vector<NodeProbe>& nodes);

// The findings about the nodes' wall clocks, placed against node 0's through the pings' offsets:
// a clock further than kMaxClockOffset from the median of them (of two nodes, from node 0's),
// pinned on its node only when most clocks agree without it.
std::vector<Finding> judge_clocks(const std::vector<LinkFigures>& links,
                                  const std::vector<NodeProbe>& nodes);

// "; links: median 1.1 GB/s, round trip 0.06 ms", or "" when none carried anything.
std::string links_summary(const std::vector<LinkFigures>& links);

// "94 MB/s", "1.1 GB/s" (decimal, as link rates are quoted).
std::string format_rate(double bytes_per_second);
// "0.06 ms", "12 ms": two decimals under 10 ms.
std::string format_millis(double seconds);

nlohmann::json to_json(const LinkFigures& link);
// Throws ProtocolError when `j` is not a link's figures.
LinkFigures link_from_json(const nlohmann::json& j);

}  // namespace ddprun
