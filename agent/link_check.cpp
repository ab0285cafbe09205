#include "agent/link_check.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <map>
#include <optional>

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ddprun {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// What a sender says first: who it is, which round (look and pairing), how many pings and
// bytes follow.
constexpr std::uint32_t kMagic = 0x4c505044;  // "DDPL"
constexpr std::size_t kHeaderSize = 24;
constexpr std::size_t kChunk = 256 * 1024;

struct Header {
  std::uint32_t from = 0;
  std::uint32_t round = 0;
  std::uint32_t pings = 0;
  std::uint64_t bytes = 0;
};

void put(unsigned char* at, std::uint64_t value, int size) {
  for (int i = 0; i < size; ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
}

std::uint64_t get(const unsigned char* at, int size) {
  std::uint64_t value = 0;
  for (int i = 0; i < size; ++i) value |= std::uint64_t{at[i]} << (8 * i);
  return value;
}

std::array<unsigned char, kHeaderSize> encode(const Header& h) {
  std::array<unsigned char, kHeaderSize> out{};
  put(out.data(), kMagic, 4);
  put(out.data() + 4, h.from, 4);
  put(out.data() + 8, h.round, 4);
  put(out.data() + 12, h.pings, 4);
  put(out.data() + 16, h.bytes, 8);
  return out;
}

std::optional<Header> decode(const std::array<unsigned char, kHeaderSize>& in) {
  if (get(in.data(), 4) != kMagic) return std::nullopt;
  return Header{static_cast<std::uint32_t>(get(in.data() + 4, 4)),
                static_cast<std::uint32_t>(get(in.data() + 8, 4)),
                static_cast<std::uint32_t>(get(in.data() + 12, 4)), get(in.data() + 16, 8)};
}

// A clock's reading in a ping's answer: microseconds since the epoch.
std::int64_t wall_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string seconds_text(std::chrono::milliseconds limit) {
  return fmt::format("{:g} s", std::chrono::duration<double>(limit).count());
}

}  // namespace

int link_pairings(int nodes) { return nodes < 2 ? 0 : nodes == 2 ? 1 : 2; }

// The second pairing's offset: half the ring away, or for three nodes the ring backwards.
int link_target(int node, int nodes, int pairing) {
  if (pairing >= link_pairings(nodes)) return -1;
  const int offset = pairing == 0 ? 1 : nodes == 3 ? 2 : nodes / 2;
  return (node + offset) % nodes;
}

int link_source(int node, int nodes, int pairing) {
  if (pairing >= link_pairings(nodes)) return -1;
  const int offset = pairing == 0 ? 1 : nodes == 3 ? 2 : nodes / 2;
  return (node - offset + nodes) % nodes;
}

struct LinkCheck::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  tcp::resolver resolver{io};
  // Host names, once looked up, and those that could not be.
  std::map<std::string, tcp::resolver::results_type> resolved;
  std::map<std::string, boost::system::error_code> unresolved;
  std::string listen_error;
  std::vector<char> chunk = std::vector<char>(kChunk);

  Impl() {
    // Every address, so that a peer reaches it by whatever this host's name resolves to there;
    // IPv6 with IPv4 mapped where the machine has IPv6.
    for (const auto& protocol : {tcp::v6(), tcp::v4()}) {
      boost::system::error_code ec;
      acceptor.open(protocol, ec);
      if (!ec && protocol == tcp::v6()) acceptor.set_option(asio::ip::v6_only(false), ec);
      if (!ec) acceptor.bind(tcp::endpoint(protocol, 0), ec);
      if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
      if (!ec) {
        listen_error.clear();
        return;
      }
      listen_error = ec.message();
      acceptor.close(ec);
    }
  }

  // Set when the round's time is up: a completion already queued then must not start another
  // wait, which nothing would end.
  bool closing = false;
  void go_on() const {
    if (closing) throw boost::system::system_error(asio::error::operation_aborted);
  }

  asio::awaitable<void> send(tcp::socket& socket, const std::string& host, std::uint16_t port,
                             Header header, LinkFigures& out) {
    // A coroutine starts when the io_context first runs, which may be after the time is up.
    go_on();
    // An address needs no resolver. A name is looked up once per check: the lookup runs on a
    // thread of its own that cannot be cut short, so only its first pairing waits for it.
    boost::system::error_code not_literal;
    const auto literal = asio::ip::make_address(host, not_literal);
    if (!not_literal) {
      co_await socket.async_connect(tcp::endpoint(literal, port), asio::use_awaitable);
    } else {
      if (const auto failed = unresolved.find(host); failed != unresolved.end()) {
        throw boost::system::system_error(failed->second);
      }
      auto known = resolved.find(host);
      if (known == resolved.end()) {
        tcp::resolver::results_type found;
        try {
          found = co_await resolver.async_resolve(host, "0", asio::use_awaitable);
        } catch (const boost::system::system_error& e) {
          if (e.code() != asio::error::operation_aborted) unresolved.emplace(host, e.code());
          throw;
        }
        known = resolved.emplace(host, std::move(found)).first;
        go_on();
      }
      std::vector<tcp::endpoint> endpoints;
      for (const auto& entry : known->second) {
        endpoints.emplace_back(entry.endpoint().address(), port);
      }
      co_await asio::async_connect(socket, endpoints, asio::use_awaitable);
    }
    go_on();
    socket.set_option(tcp::no_delay(true));
    const auto head = encode(header);
    co_await asio::async_write(socket, asio::buffer(head), asio::use_awaitable);
    // Each answer carries the peer's clock, read between this ping's send and its answer's
    // arrival: the offset of the shortest round trip is known to within half of it.
    char byte = 0;
    std::array<unsigned char, 8> answer{};
    for (std::uint32_t i = 0; i < header.pings; ++i) {
      go_on();
      const auto sent = Clock::now();
      const auto sent_wall = wall_micros();
      co_await asio::async_write(socket, asio::buffer(&byte, 1), asio::use_awaitable);
      go_on();
      co_await asio::async_read(socket, asio::buffer(answer), asio::use_awaitable);
      const double rtt = since(sent);
      if (out.rtt_seconds == 0 || rtt < out.rtt_seconds) {
        const auto peer = static_cast<std::int64_t>(get(answer.data(), 8));
        out.rtt_seconds = rtt;
        out.clock_offset_seconds = static_cast<double>(peer - sent_wall) * 1e-6 - rtt / 2;
      }
    }
    for (std::uint64_t left = header.bytes; left > 0;) {
      go_on();
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
      co_await asio::async_write(socket, asio::buffer(chunk.data(), n), asio::use_awaitable);
      left -= n;
    }
  }

  // Takes connections until one of `source` in `round` says who it is: one left in the backlog
  // by a round that ran out of time, or one that closes before its header, is closed unread.
  asio::awaitable<void> receive(tcp::socket& socket, int round, int source, LinkFigures& in) {
    go_on();
    Header header;
    for (;;) {
      socket = co_await acceptor.async_accept(asio::use_awaitable);
      go_on();
      std::array<unsigned char, kHeaderSize> head{};
      std::optional<Header> h;
      try {
        co_await asio::async_read(socket, asio::buffer(head), asio::use_awaitable);
        h = decode(head);
      } catch (const boost::system::system_error&) {
        h.reset();
      }
      go_on();
      if (h && static_cast<int>(h->round) == round && static_cast<int>(h->from) == source) {
        header = *h;
        break;
      }
      socket.close();
    }
    socket.set_option(tcp::no_delay(true));
    char byte = 0;
    std::array<unsigned char, 8> answer{};
    for (std::uint32_t i = 0; i < header.pings; ++i) {
      co_await asio::async_read(socket, asio::buffer(&byte, 1), asio::use_awaitable);
      go_on();
      put(answer.data(), static_cast<std::uint64_t>(wall_micros()), 8);
      co_await asio::async_write(socket, asio::buffer(answer), asio::use_awaitable);
      go_on();
    }
    // The sender starts its bytes when the last answer reaches it: half a round trip, nothing
    // next to the megabytes measured.
    const auto start = Clock::now();
    std::vector<char> landing(kChunk);
    while (in.bytes < header.bytes) {
      in.bytes += co_await socket.async_read_some(asio::buffer(landing), asio::use_awaitable);
      in.seconds = since(start);
      go_on();
    }
  }
};

LinkCheck::LinkCheck() : impl_(std::make_unique<Impl>()) {}
LinkCheck::~LinkCheck() = default;

std::uint16_t LinkCheck::port() const {
  boost::system::error_code ec;
  const auto endpoint = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : endpoint.port();
}

const std::string& LinkCheck::listen_error() const { return impl_->listen_error; }

std::pair<LinkFigures, LinkFigures> LinkCheck::run(int me, int round, int target,
                                                   const std::string& host, std::uint16_t port,
                                                   int source, std::uint64_t bytes,
                                                   std::chrono::milliseconds limit) {
  auto& io = impl_->io;
  io.restart();
  impl_->closing = false;
  LinkFigures out;
  out.from = me;
  out.to = target;
  out.pairing = round;
  LinkFigures in;
  in.from = source;
  in.to = me;
  in.pairing = round;
  const auto end = Clock::now() + limit;
  tcp::socket out_socket(io), in_socket(io);
  // Whatever ends a side early (refused, reset, cancelled when the time is up) is its error,
  // except a sender cut off in its bytes: the receiver's figures say how far it got.
  auto message = [](std::exception_ptr e) -> std::string {
    try {
      std::rethrow_exception(e);
    } catch (const boost::system::system_error& err) {
      return err.code().message();
    } catch (const std::exception& err) {
      return err.what();
    } catch (...) {
      return "an unknown error";
    }
  };
  const std::string waited = seconds_text(limit);
  // The two ends' times are not the same: each starts its own after the store's barrier, so
  // the end whose time is up first closes the connection under the other. Once bytes flow,
  // that is a link cut short, measured by the bytes that arrived, not a broken one.
  auto on_sent = [&](std::exception_ptr e) {
    if (!e || out.rtt_seconds > 0) return;
    out.error = Clock::now() < end ? message(e) : "no answer within " + waited;
  };
  auto on_received = [&](std::exception_ptr e) {
    if (!e) return;
    if (in.bytes > 0) {
      in.cut_short = true;
    } else {
      in.error = Clock::now() < end ? message(e) : "nothing arrived within " + waited;
    }
  };
  if (target >= 0) {
    if (port == 0) {
      out.error = "it has no listener for the link check";
    } else {
      const Header header{static_cast<std::uint32_t>(me), static_cast<std::uint32_t>(round),
                          kLinkPings, bytes};
      asio::co_spawn(io, impl_->send(out_socket, host, port, header, out),
                     on_sent);
    }
  }
  if (source >= 0) {
    if (impl_->listen_error.empty()) {
      asio::co_spawn(io, impl_->receive(in_socket, round, source, in), on_received);
    } else {
      in.error = "no listener here: " + impl_->listen_error;
    }
  }
  io.run_until(end);
  // Time is up: whatever still waits is cancelled and ends through its handler.
  impl_->closing = true;
  boost::system::error_code ignored;
  out_socket.close(ignored);
  in_socket.close(ignored);
  impl_->acceptor.cancel(ignored);
  impl_->resolver.cancel();
  io.run();
  return {out, in};
}

std::vector<LinkFigures> look_at_links(store::Store& store, const std::string& prefix,
                                       LinkCheck& check, const std::vector<NodeProbe>& nodes,
                                       int me, std::uint64_t bytes, int look, Deadline deadline,
                                       const std::optional<LinkSet>& only) {
  const int n = static_cast<int>(nodes.size());
  std::vector<LinkFigures> all;
  for (int pairing = 0; pairing < link_pairings(n); ++pairing) {
    auto looked_at = [&](int sender) { return !only || only->count({pairing, sender}) > 0; };
    if (only && only->lower_bound({pairing, 0}) == only->lower_bound({pairing + 1, 0})) continue;
    const int target = link_target(me, n, pairing);
    const int source = link_source(me, n, pairing);
    const int round = look * 2 + pairing;
    // A node on neither of its links in this look reports nothing of them, and still reports:
    // every node reads every report.
    nlohmann::json report{{"out", nullptr}, {"in", nullptr}};
    if (looked_at(me) || looked_at(source)) {
      auto [out, in] = check.run(me, round, looked_at(me) ? target : -1, nodes[target].host,
                                 nodes[target].link_port, looked_at(source) ? source : -1, bytes);
      out.pairing = in.pairing = pairing;
      if (looked_at(me)) report["out"] = to_json(out);
      if (looked_at(source)) report["in"] = to_json(in);
    }
    const auto values =
        exchange_reports(store, fmt::format("{}/node_check/links/{}", prefix, round), me,
                         report.dump(), n, "its links", deadline);
    // The sender's half (round trip, connection) and the receiver's (bytes) of each link.
    std::map<int, LinkFigures> received;  // by sender
    std::vector<LinkFigures> sent;
    for (const auto& value : values) {
      const auto j = nlohmann::json::parse(value, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("out") || !j.contains("in")) {
        throw ProtocolError("a node's link report is not what this ddprun writes");
      }
      if (!j["out"].is_null()) sent.push_back(link_from_json(j["out"]));
      if (!j["in"].is_null()) {
        const auto r = link_from_json(j["in"]);
        received[r.from] = r;
      }
    }
    for (auto link : sent) {
      if (const auto it = received.find(link.from); it != received.end()) {
        const auto& r = it->second;
        link.bytes = r.bytes;
        link.seconds = r.seconds;
        link.cut_short = r.cut_short;
        if (link.error.empty()) link.error = r.error;
      }
      all.push_back(std::move(link));
    }
  }
  return all;
}

namespace {

// Of two looks at one link, the better: a moment of a busy machine only ever slows a link.
LinkFigures better(const LinkFigures& a, const LinkFigures& b) {
  if (!a.error.empty()) return b;
  if (!b.error.empty()) return a;
  LinkFigures out = a.bytes_per_second() >= b.bytes_per_second() ? a : b;
  // The clock's offset goes with the round trip that bounds its error.
  const LinkFigures& nearer = a.rtt_seconds > 0 && (b.rtt_seconds == 0 || a.rtt_seconds <=
                                                    b.rtt_seconds) ? a : b;
  out.rtt_seconds = nearer.rtt_seconds;
  out.clock_offset_seconds = nearer.clock_offset_seconds;
  return out;
}

}  // namespace

void keep_better(std::vector<LinkFigures>& best, const std::vector<LinkFigures>& again) {
  for (const auto& a : again) {
    for (auto& b : best) {
      if (b.pairing == a.pairing && b.from == a.from) b = better(b, a);
    }
  }
}

MeasuredLinks measure_links(store::Store& store, const std::string& prefix, LinkCheck& check,
                            const std::vector<NodeProbe>& nodes, int me, std::uint64_t bytes,
                            Deadline deadline) {
  MeasuredLinks m;
  m.links = look_at_links(store, prefix, check, nodes, me, bytes, 0, deadline, std::nullopt);
  m.norm = link_norm(m.links, nodes);
  for (int look = 1; look < kLinkLooks; ++look) {
    const auto doubtful = links_in_doubt(m.links, m.norm);
    if (doubtful.empty()) break;
    keep_better(m.links,
                look_at_links(store, prefix, check, nodes, me, bytes, look, deadline, doubtful));
  }
  return m;
}

namespace {

struct NodeBest {
  std::vector<double> rates;  // every link it is on that carried bytes
  std::vector<double> rtts;
  double best_rate() const { return *std::max_element(rates.begin(), rates.end()); }
  double best_rtt() const { return *std::min_element(rtts.begin(), rtts.end()); }
};

// What the nodes' links carried, node by node.
std::map<int, NodeBest> node_bests(const std::vector<LinkFigures>& links) {
  std::map<int, NodeBest> by_node;
  for (const auto& l : links) {
    if (!l.error.empty()) continue;
    for (int node : {l.from, l.to}) {
      auto& b = by_node[node];
      b.rates.push_back(l.bytes_per_second());
      if (l.rtt_seconds > 0) b.rtts.push_back(l.rtt_seconds);
    }
  }
  return by_node;
}

const std::string& host_of(const std::vector<NodeProbe>& nodes, int node) {
  static const std::string unknown = "?";
  return node >= 0 && node < static_cast<int>(nodes.size()) ? nodes[node].host : unknown;
}

}  // namespace

bool LinkNorm::slow(double bytes_per_second) const {
  return bytes_per_second < kLinkFractionOfMedian * rate_median;
}

bool LinkNorm::far(double rtt_seconds) const {
  const double excess = std::chrono::duration<double>(kMinLatencyExcess).count();
  return rtt_median > 0 && rtt_seconds > kLatencyFactorOfMedian * rtt_median &&
         rtt_seconds - rtt_median >= excess;
}

std::optional<LinkNorm> link_norm(const std::vector<LinkFigures>& links,
                                  const std::vector<NodeProbe>& nodes) {
  const auto by_node = node_bests(links);
  if (nodes.size() < 3 || by_node.size() < 3) return std::nullopt;
  std::vector<double> bests, rtts;
  for (const auto& [node, b] : by_node) {
    bests.push_back(b.best_rate());
    if (!b.rtts.empty()) rtts.push_back(b.best_rtt());
  }
  return LinkNorm{upper_median(std::move(bests)), rtts.empty() ? 0 : upper_median(rtts)};
}

LinkSet links_in_doubt(const std::vector<LinkFigures>& links,
                       const std::optional<LinkNorm>& norm) {
  LinkSet out;
  if (!norm) return out;
  for (const auto& l : links) {
    if (l.error.empty() && (norm->slow(l.bytes_per_second()) ||
                            (l.rtt_seconds > 0 && norm->far(l.rtt_seconds)))) {
      out.insert({l.pairing, l.from});
    }
  }
  return out;
}

std::vector<Finding> judge_links(const std::vector<LinkFigures>& links,
                                 const std::vector<NodeProbe>& nodes) {
  return judge_links(links, nodes, link_norm(links, nodes));
}

std::vector<Finding> judge_links(const std::vector<LinkFigures>& links,
                                 const std::vector<NodeProbe>& nodes,
                                 const std::optional<LinkNorm>& norm) {
  std::vector<Finding> out;
  auto name = [&](int node, std::string what, int link_to = -1) {
    out.push_back({node, host_of(nodes, node), std::move(what), link_to});
  };
  // A node none of whose links carried anything is what they have in common: once there are
  // three nodes to tell it from its peers, it is named as the node, and its links are not.
  std::map<int, int> on, failed;
  for (const auto& l : links) {
    for (int node : {l.from, l.to}) {
      ++on[node];
      if (!l.error.empty()) ++failed[node];
    }
  }
  std::map<int, bool> cut_off;
  if (nodes.size() >= 3) {
    for (const auto& [node, count] : on) {
      if (failed[node] != count) continue;
      cut_off[node] = true;
      const auto first = std::find_if(links.begin(), links.end(), [node = node](const auto& l) {
        return l.from == node || l.to == node;
      });
      name(node, fmt::format("no link to or from it carried anything: {}", first->error));
    }
  }
  for (const auto& l : links) {
    if (!l.error.empty() && !cut_off[l.from] && !cut_off[l.to]) {
      name(l.from, fmt::format("link to node {} ({}): {}", l.to, host_of(nodes, l.to), l.error),
           l.to);
    }
  }
  if (norm) {
    const auto by_node = node_bests(links);
    const double rate_median = norm->rate_median;
    const double rtt_median = norm->rtt_median;
    // A node named as the node explains its links: a slow one's queues make its round trips
    // long too, so it is named once, as slow.
    std::map<int, bool> named_node;
    for (const auto& [node, b] : by_node) {
      const bool slow_node = norm->slow(b.best_rate());
      const bool far_node = !slow_node && !b.rtts.empty() && norm->far(b.best_rtt());
      named_node[node] = slow_node || far_node;
      if (slow_node) {
        name(node, fmt::format("every link to and from it is slow: at most {}, the nodes' "
                               "median {}",
                               format_rate(b.best_rate()), format_rate(rate_median)));
      }
      if (far_node) {
        name(node, fmt::format("every link to and from it is far: round trips of {} or more, "
                               "the nodes' median {}",
                               format_millis(b.best_rtt()), format_millis(rtt_median)));
      }
    }
    for (const auto& l : links) {
      if (!l.error.empty() || named_node[l.from] || named_node[l.to]) continue;
      const std::string link = fmt::format("link to node {} ({})", l.to, host_of(nodes, l.to));
      if (norm->slow(l.bytes_per_second())) {
        name(l.from,
             fmt::format("{}: {}{}, the nodes' median {}", link, format_rate(l.bytes_per_second()),
                         l.cut_short ? " (cut short)" : "", format_rate(rate_median)),
             l.to);
      }
      if (l.rtt_seconds > 0 && norm->far(l.rtt_seconds)) {
        name(l.from,
             fmt::format("{}: round trip {}, the nodes' median {}", link,
                         format_millis(l.rtt_seconds), format_millis(rtt_median)),
             l.to);
      }
    }
  }
  order_by_node(out);
  return out;
}

std::vector<Finding> judge_clocks(const std::vector<LinkFigures>& links,
                                  const std::vector<NodeProbe>& nodes) {
  // Every node's clock against node 0's, placed breadth first along the links that carried
  // pings (either way), so that each is as few links from node 0 as they allow: every link adds
  // up to half its round trip of error.
  std::map<int, std::vector<std::pair<int, double>>> peers;  // the peer and its clock minus ours
  for (const auto& l : links) {
    if (l.rtt_seconds <= 0) continue;
    peers[l.from].emplace_back(l.to, l.clock_offset_seconds);
    peers[l.to].emplace_back(l.from, -l.clock_offset_seconds);
  }
  std::map<int, double> clock{{0, 0.0}};
  for (std::deque<int> next{0}; !next.empty(); next.pop_front()) {
    for (const auto& [peer, offset] : peers[next.front()]) {
      if (clock.emplace(peer, clock[next.front()] + offset).second) next.push_back(peer);
    }
  }
  std::vector<Finding> out;
  if (clock.size() < 2) return out;
  // Of three clocks or more, the median; of two, node 0's (the store's host, as a rule). A
  // clock off is pinned on its node only when most clocks agree without it; otherwise (two
  // nodes, an even split) the finding is about it and the reference's node together.
  std::vector<double> values;
  for (const auto& [node, c] : clock) values.push_back(c);
  const bool median = clock.size() >= 3;
  const double reference = median ? upper_median(values) : 0.0;
  const double limit = std::chrono::duration<double>(kMaxClockOffset).count();
  int reference_node = 0, agree = 0;
  for (const auto& [node, c] : clock) {
    if (c == reference) reference_node = node;
    if (std::abs(c - reference) <= limit) ++agree;
  }
  const bool pinned = 2 * agree > static_cast<int>(clock.size());
  for (const auto& [node, c] : clock) {
    const double off = c - reference;
    if (std::abs(off) <= limit) continue;
    out.push_back({node, host_of(nodes, node),
                   fmt::format("its clock is {:.1f} s {} {}", std::abs(off),
                               off > 0 ? "ahead of" : "behind",
                               median ? "the nodes' median" : "node 0's"),
                   pinned ? -1 : reference_node});
  }
  return out;
}

std::string links_summary(const std::vector<LinkFigures>& links) {
  std::vector<double> rates, rtts;
  for (const auto& l : links) {
    if (!l.error.empty()) continue;
    rates.push_back(l.bytes_per_second());
    if (l.rtt_seconds > 0) rtts.push_back(l.rtt_seconds);
  }
  if (rates.empty()) return "";
  const auto rtt = rtts.empty() ? "" : ", round trip " + format_millis(upper_median(rtts));
  return fmt::format("; links: median {}{}", format_rate(upper_median(rates)), rtt);
}

std::string format_millis(double seconds) {
  const double millis = seconds * 1e3;
  return millis < 10 ? fmt::format("{:.2f} ms", millis) : fmt::format("{:.0f} ms", millis);
}

std::string format_rate(double bytes_per_second) {
  static constexpr const char* kUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  // The unit is chosen after rounding: 999.97 MB/s reads 1.0 GB/s, not 1000 MB/s.
  int unit = 0;
  while (bytes_per_second >= 999.5 && unit < 4) {
    bytes_per_second /= 1000;
    ++unit;
  }
  return bytes_per_second < 9.95 && unit > 0
             ? fmt::format("{:.1f} {}", bytes_per_second, kUnits[unit])
             : fmt::format("{:.0f} {}", bytes_per_second, kUnits[unit]);
}

nlohmann::json to_json(const LinkFigures& l) {
  return {{"from", l.from},
          {"to", l.to},
          {"pairing", l.pairing},
          {"rtt_seconds", l.rtt_seconds},
          {"clock_offset_seconds", l.clock_offset_seconds},
          {"bytes", l.bytes},
          {"seconds", l.seconds},
          {"bytes_per_second", l.bytes_per_second()},
          {"cut_short", l.cut_short},
          {"error", l.error}};
}

LinkFigures link_from_json(const nlohmann::json& j) {
  try {
    LinkFigures l;
    l.from = j.at("from").get<int>();
    l.to = j.at("to").get<int>();
    l.pairing = j.at("pairing").get<int>();
    l.rtt_seconds = j.at("rtt_seconds").get<double>();
    l.clock_offset_seconds = j.at("clock_offset_seconds").get<double>();
    l.bytes = j.at("bytes").get<std::uint64_t>();
    l.seconds = j.at("seconds").get<double>();
    l.cut_short = j.at("cut_short").get<bool>();
    l.error = j.at("error").get<std::string>();
    return l;
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(fmt::format("a node's link figures are not what this ddprun writes "
                                    "(another version?): {}", e.what()));
  }
}

}  // namespace ddprun
