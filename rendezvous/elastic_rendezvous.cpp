#include "rendezvous/elastic_rendezvous.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "common/progress.hpp"
#include "common/random.hpp"
#include "rendezvous/job_end.hpp"
#include "rendezvous/round_records.hpp"
#include "store/prefix_store.hpp"

namespace ddprun {

namespace {

int to_int(const std::string& text, const char* what) {
  try {
    return std::stoi(text);
  } catch (const std::exception&) {
    throw RendezvousError(fmt::format("store holds '{}' for {}, not a number", text, what));
  }
}

}  // namespace

std::string round_prefix(int round) { return fmt::format("r/{}", round); }

std::string round_key(int round, const std::string& name) {
  return round_prefix(round) + "/" + name;
}

std::string news_key(int round, const std::string& name) {
  return kNewsPrefix + round_key(round, name);
}

int current_round(store::Store& store, Deadline deadline) {
  return to_int(store.compare_set("round", "", "0", deadline), "the round");
}

int advance_round(store::Store& store, int round, Deadline deadline) {
  auto now = to_int(store.compare_set("round", std::to_string(round), std::to_string(round + 1),
                                      deadline),
                    "the round");
  return std::max(now, round + 1);
}

std::vector<RoundMember> order_members(std::vector<RoundCandidate> candidates) {
  // Stayers first in their old order, then newcomers in join order.
  auto order = [](const RoundCandidate& c) {
    return c.node.prev_rank < 0 ? std::pair{1, c.slot} : std::pair{0, c.node.prev_rank};
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const auto& a, const auto& b) { return order(a) < order(b); });
  std::vector<int> sizes;
  sizes.reserve(candidates.size());
  for (const auto& c : candidates) sizes.push_back(c.node.nproc);
  const auto ranks = assign_all_ranks(sizes);
  std::vector<RoundMember> members(candidates.size());
  for (std::size_t g = 0; g < candidates.size(); ++g) {
    members[g].slot = candidates[g].slot;
    members[g].host = candidates[g].node.host;
    members[g].ranks = ranks[g];
    members[g].successor_host = candidates[(g + 1) % candidates.size()].node.host;
  }
  return members;
}

int kept_ring(const std::vector<RoundCandidate>& candidates) {
  const int n = static_cast<int>(candidates.size());
  if (n < 2) return -1;
  const auto& first = candidates.front().node;
  if (first.prev_round < 0 || first.prev_ring < 0) return -1;
  std::vector<bool> taken(static_cast<std::size_t>(n), false);
  for (const auto& c : candidates) {
    const auto& p = c.node;
    if (p.prev_round != first.prev_round || p.prev_ring != first.prev_ring ||
        p.prev_members != n || p.prev_rank < 0 || p.prev_rank >= n ||
        taken[static_cast<std::size_t>(p.prev_rank)]) {
      return -1;
    }
    taken[static_cast<std::size_t>(p.prev_rank)] = true;
  }
  return first.prev_ring;
}

namespace {

// How soon a closer that found too few nodes published tries again (its look at the slots
// waits for the missing ones too, up to the read timeout or 5 s).
constexpr std::chrono::milliseconds kCloseAgain{100};

// A member's result in a closed round, from its assignment.
RoundResult member_place(int round, int slot, const ClosedRound& closed, const RoundAssignment& a,
                         int nproc) {
  RoundResult result;
  result.round = round;
  result.slot = slot;
  result.member = true;
  result.members = closed.members;
  result.failures = closed.failures;
  result.ring_round = closed.ring_round >= 0 ? closed.ring_round : round;
  result.master_host = closed.master_host;
  result.successor_host = a.successor_host;
  result.ranks.group_rank = a.group_rank;
  result.ranks.base_rank = a.base_rank;
  result.ranks.group_world_size = closed.members;
  result.ranks.local_world_size = nproc;
  result.ranks.world_size = closed.world_size;
  return result;
}

// One node's join of one round (see the header): takes a slot, publishes its descriptor, closes
// the round when it is the one to, waits for the round to close, and reads its place in it.
class RoundJoin {
 public:
  RoundJoin(store::Store& store, int round, const ElasticNode& self, const ElasticRendezvousOptions& o,
            const std::optional<RoundAssignment>& previous)
      : store_(store),
        rs_(round_prefix(round), store),
        round_(round),
        self_(self),
        o_(o),
        previous_(previous),
        progress_(o.progress_interval),
        repairs_(ProgressClock::every(repair_every(o))) {}

  RoundResult run() {
    const int slot = static_cast<int>(rs_.add("join", 1, op())) - 1;
    rs_.set(fmt::format("node/{}", slot), encode_node(self_), op());
    spdlog::info("rendezvous: joined round {} as node slot {} (need {}..{} nodes)", round_, slot,
                 o_.min_nodes, o_.max_nodes);
    may_close_ = slot + 1 >= o_.min_nodes;
    if (slot + 1 == o_.max_nodes) {
      closing_ = !close(o_.max_nodes);  // full: no reason to wait for anyone
    } else if (slot + 1 >= o_.min_nodes && slot + 1 < o_.max_nodes) {
      if (!await_closed(Deadline::after(o_.last_call_timeout), true)) closing_ = !close(joined());
    }
    const auto deadline = Deadline::at(start_ + o_.join_timeout);
    auto closed = await_closed(closing_ ? earlier(deadline, kCloseAgain) : deadline, false);
    while (!closed && !deadline.expired()) {
      if (closing_) closing_ = !close(joined());
      closed = await_closed(closing_ ? earlier(deadline, kCloseAgain) : deadline, false);
    }
    if (!closed) {
      throw TimeoutError(fmt::format(
          "rendezvous timed out after {}: {} node(s) joined round {}, at least {} needed "
          "(store at {})",
          format_duration(Clock::now() - start_), joined(), round_, o_.min_nodes,
          store_.describe()));
    }
    return place(slot, decode_closed(*closed));
  }

 private:
  Deadline op() const { return Deadline::after(o_.read_timeout); }

  // Often enough that a stale claim is found soon after it went stale.
  static std::chrono::milliseconds repair_every(const ElasticRendezvousOptions& o) {
    return std::min(repair_pace(o.progress_interval),
                    std::max<std::chrono::milliseconds>(o.claim_stale_after / 4,
                                                        std::chrono::milliseconds(10)));
  }
  int joined() { return static_cast<int>(rs_.add("join", 0, op())); }

  static Deadline earlier(Deadline deadline, std::chrono::milliseconds after) {
    const auto soon = Deadline::after(after);
    return soon.remaining() < deadline.remaining() ? soon : deadline;
  }

  // The closer (one node, chosen by compare_set on "closing") reads every descriptor once,
  // computes the order and the ranks, writes each member its own assignment, and only then
  // publishes "closed". Every other node reads two small keys: O(n) traffic in all, not O(n^2).
  // Members are the slots that had published a descriptor, so a joiner that died half-way is
  // left out instead of stalling everyone; but never below the round's minimum, since a joiner
  // between its slot and its descriptor on a busy machine is alive: then the claim goes back
  // and false says to try again (run() does, with the slots joined by then). True: closed here
  // or by another node.
  //
  // The claim is this node's id and a count of its claims, so that each is new: `expected` is
  // the claim a node takes over from a closer that looked lost (repair_claim). A closer that
  // was only slow then cannot disturb the round: its assignments go under its own claim, and
  // only the first record published counts.
  bool close(int joined, const std::string& expected = "") {
    const auto mine = fmt::format("{}#{}{}", self_.id, nonce_, ++claims_);
    if (rs_.compare_set("closing", expected, mine, op()) != mine) return true;
    std::vector<std::optional<std::string>> records;
    try {
      records = descriptors(std::min(joined, o_.max_nodes));
      if (published(records) < o_.min_nodes) {
        if (!said_short_) {
          spdlog::info("rendezvous: round {}: {} of {} slot(s) have published their node, at "
                       "least {} needed; waiting for them to close it",
                       round_, published(records), records.size(), o_.min_nodes);
          said_short_ = true;
        }
        rs_.compare_set("closing", mine, "", op());
        return false;
      }
    } catch (...) {
      // Interrupted or failed holding the claim: it goes back for the others.
      try {
        rs_.compare_set("closing", mine, "", op());
      } catch (const Error&) {
      }
      throw;
    }
    std::vector<RoundCandidate> candidates;
    ClosedRound closed;
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (!records[i]) {
        spdlog::warn("rendezvous: round {} slot {} never published its node; left out", round_,
                     i);
        continue;
      }
      candidates.push_back({static_cast<int>(i), decode_node(*records[i])});
      closed.failures = std::max(closed.failures, candidates.back().node.failures);
    }
    closed.ring_round = kept_ring(candidates);
    if (closed.ring_round >= 0) closed.ranks_of = candidates.front().node.prev_round;
    const auto members = order_members(std::move(candidates));
    closed.members = static_cast<int>(members.size());
    std::vector<std::string> keys;
    std::vector<std::string> assignments;
    for (const auto& m : members) {
      keys.push_back(fmt::format("assign/{}/{}", mine, m.slot));
      assignments.push_back(
          encode_assignment({m.ranks.group_rank, m.ranks.base_rank, m.successor_host}));
    }
    if (!members.empty()) {
      rs_.multi_set(keys, assignments, op());
      closed.world_size = members.front().ranks.world_size;
      closed.master_host = members.front().host;
    }
    closed.closer = mine;
    store_.compare_set(news_key(round_, "closed"), "", encode_closed(closed), op());
    return true;
  }

  static int published(const std::vector<std::optional<std::string>>& records) {
    return static_cast<int>(std::count_if(records.begin(), records.end(),
                                          [](const auto& r) { return r.has_value(); }));
  }

  // The descriptors of slots 0..slots-1, nullopt for a slot that published none. One multi_get;
  // when that does not come back in time, one read per slot.
  std::vector<std::optional<std::string>> descriptors(int slots) {
    std::vector<std::string> keys;
    for (int s = 0; s < slots; ++s) keys.push_back(fmt::format("node/{}", s));
    std::vector<std::optional<std::string>> records(keys.size());
    try {
      auto values = rs_.multi_get(keys, Deadline::after(std::min<std::chrono::milliseconds>(
                                            o_.read_timeout, std::chrono::seconds(5))));
      for (std::size_t i = 0; i < values.size(); ++i) records[i] = std::move(values[i]);
    } catch (const TimeoutError&) {
      for (std::size_t i = 0; i < keys.size(); ++i) records[i] = rs_.try_get(keys[i], op());
    }
    return records;
  }

  // Waits for the round to close until `deadline`, saying how far it got now and then.
  // Returns the round record, or nullopt when the deadline passed.
  std::optional<std::string> await_closed(Deadline deadline, bool last_call) {
    while (true) {
      try {
        return store_.get(news_key(round_, "closed"),
                          repairs_.slice(progress_.slice(deadline)));
      } catch (const TimeoutError&) {
        if (deadline.expired()) return std::nullopt;
      }
      if (repairs_.due()) {
        repair_claim(last_call);
        if (closing_ && !last_call) return std::nullopt;  // it took a claim it must try again
      }
      if (!progress_.due()) continue;
      const int n = joined();
      if (last_call) {
        spdlog::info("rendezvous: round {}: {} node(s) joined ({}..{} wanted); closing in {} "
                     "unless {} more join",
                     round_, n, o_.min_nodes, o_.max_nodes,
                     format_duration(deadline.remaining()), o_.max_nodes - n);
      } else {
        spdlog::info("rendezvous: round {}: {} node(s) joined, at least {} needed; {} (store at {})",
                     round_, n, o_.min_nodes, progress_.elapsed_of(o_.join_timeout),
                     store_.describe());
      }
    }
  }

  // What a node waiting for the round to close repairs, now and then: a claim to close it
  // whose holder was lost half-way (SIGKILLed, or signalled after its store connection ended,
  // so that it could not give the claim back). A joiner's claim that has not moved for
  // claim_stale_after is taken over; so is no claim at all, by a node that may close the
  // round, once its own last call is over (the closer gave the claim back and failed).
  void repair_claim(bool last_call) {
    const auto claim = rs_.try_get("closing", op()).value_or("");
    if (!claim.empty() && claim.front() == '{') {
      complete_settled(claim);
      return;
    }
    const auto now = Clock::now();
    if (last_call || claim != seen_claim_ || !seen_since_) {
      seen_claim_ = claim;
      seen_since_ = now;
      return;
    }
    const auto still = now - *seen_since_;
    // No claim while this node is closing is its own, between two tries.
    if (still < o_.claim_stale_after || (claim.empty() && (!may_close_ || closing_))) return;
    if (store_.check({news_key(round_, "closed")}, op())) return;
    const int n = joined();
    if (n < o_.min_nodes) return;
    if (claim.empty()) {
      spdlog::warn("rendezvous: round {}: {} node(s) joined and none has closed it for {}; "
                   "closing it here", round_, n, format_duration(still));
    } else {
      spdlog::warn("rendezvous: round {}: {}, which claimed to close it, has not done so in "
                   "{}; taking the claim over", round_, claim.substr(0, claim.rfind('#')),
                   format_duration(still));
    }
    seen_since_.reset();
    // Too few nodes published: a taker of a lost closer's claim tries again as that closer
    // would have; the taker of no claim comes back at its own pace.
    const bool fell_short = !close(n, claim);
    if (!claim.empty()) closing_ = fell_short;
  }

  // A round claimed by the chooser of the last one's root cause (settle_next_round) whose
  // record was never published (the chooser died or failed half-way): publishes it, so that
  // its members run it and a latecomer learns it is not one.
  void complete_settled(const std::string& claim) {
    try {
      const auto settled = decode_settled(claim);
      if (settled.round != round_ || store_.check({news_key(round_, "closed")}, op())) return;
      spdlog::warn("rendezvous: round {} was closed ahead but never published; publishing it",
                   round_);
      publish_settled(store_, settled, op());
    } catch (const RendezvousError& e) {
      spdlog::warn("rendezvous: round {}: {}", round_, e.what());
    }
  }

  // This node's place in the closed round. Assignments are written before "closed": no
  // assignment now means not a member. A round of the last round's members keeps every place
  // (kept_ring: each candidate was there, at its own group rank), so a member of it knows its
  // place without a read: a request per node fewer on a restart's path.
  RoundResult place(int slot, const ClosedRound& closed) {
    const bool kept = previous_ && closed.ranks_of >= 0 && closed.ranks_of == self_.prev_round;
    std::optional<RoundAssignment> assignment;
    if (kept) {
      assignment = previous_;
    } else if (auto text = rs_.try_get(closed.closer.empty()
                                           ? fmt::format("assign/{}", slot)
                                           : fmt::format("assign/{}/{}", closed.closer, slot),
                                       op())) {
      assignment = decode_assignment(*text);
    }
    if (!assignment) {
      RoundResult outside;
      outside.round = round_;
      outside.slot = slot;
      outside.members = closed.members;
      outside.failures = closed.failures;
      return outside;
    }
    auto result = member_place(round_, slot, closed, *assignment, self_.nproc);
    result.ranks_kept = kept;
    spdlog::info("rendezvous: round {} closed in {} with {} nodes; this node is group rank {} "
                 "(ranks {}..{} of {})",
                 round_, format_duration(Clock::now() - start_), result.members,
                 result.ranks.group_rank, result.ranks.base_rank,
                 result.ranks.base_rank + self_.nproc - 1, result.ranks.world_size);
    return result;
  }

  store::Store& store_;
  store::PrefixStore rs_;  // this round's keys
  const int round_;
  const ElasticNode& self_;
  const ElasticRendezvousOptions& o_;
  const std::optional<RoundAssignment>& previous_;
  const Clock::time_point start_ = Clock::now();
  ProgressClock progress_;
  ProgressClock repairs_;  // repair_claim(), whether or not progress lines are on
  bool may_close_ = false;  // this node's slot reached the minimum: it may close the round
  // It claimed the closing, but too few slots had published their nodes: it tries again.
  bool closing_ = false;
  int claims_ = 0;  // of the round's closing, by this node
  // Tells this agent's claims from those of an earlier one of the same host and pid (a
  // container's first process, restarted).
  const std::string nonce_ = random_hex(4) + ".";
  std::string seen_claim_;  // the closing claim, as repair_claim last read it
  std::optional<Clock::time_point> seen_since_;  // since when it has been that
  bool said_short_ = false;  // close() said once that it waits for slots to publish their node
};

}  // namespace

RoundResult join_round(store::Store& store, int round, const ElasticNode& self,
                       const ElasticRendezvousOptions& options,
                       const std::optional<RoundAssignment>& previous) {
  return RoundJoin(store, round, self, options, previous).run();
}

std::optional<SettledRound> settle_next_round(store::Store& store, int round,
                                              const ClosedRound& next, int joins,
                                              Deadline deadline) {
  // A node that joined `round` beyond its members (a latecomer, a hot spare) waits to join:
  // the next round forms as usual, with it.
  if (store.add(round_key(round, "join"), 0, deadline) != joins) return std::nullopt;
  // The claim to close the next round, holding the whole record: whoever finds it claimed
  // and no record published can publish it (complete_settled), so a chooser that dies or
  // fails half-way leaves no round that nobody closes. Losing the claim (a joiner closes the
  // round) leaves it to form as usual. The join counter is left alone: joiners after this
  // take slots from 0, find no assignment and are not members.
  const SettledRound settled{round + 1, next};
  const auto claim = encode_settled(settled);
  if (store.compare_set(round_key(round + 1, "closing"), "", claim, deadline) != claim) {
    return std::nullopt;
  }
  if (!publish_settled(store, settled, deadline)) return std::nullopt;
  return settled;
}

bool publish_settled(store::Store& store, const SettledRound& settled, Deadline deadline) {
  // Only the first record of a round counts, as for a joiner's closing (RoundJoin::close): a
  // closer whose claim was taken over and given back meanwhile may still publish its own,
  // and nodes may have read it. Idempotent; tried again at once when the store fails, as a
  // leader's change in etcd does.
  const auto record = encode_closed(settled.closed);
  for (int attempt = 1;; ++attempt) {
    try {
      if (store.compare_set(news_key(settled.round, "closed"), "", record, deadline) != record) {
        spdlog::warn("rendezvous: round {} was closed by a joiner before its record closed "
                     "ahead was published; it runs as that joiner closed it",
                     settled.round);
        return false;
      }
      // From the round before, never back from a later one (a retry, or a node completing
      // a record after the job moved on).
      store.compare_set("round", std::to_string(settled.round - 1),
                        std::to_string(settled.round), deadline);
      return true;
    } catch (const InterruptedError&) {
      throw;
    } catch (const Error& e) {
      if (attempt == 3 || deadline.expired()) throw;
      spdlog::warn("rendezvous: publishing round {} failed ({}); trying again", settled.round,
                   e.what());
    }
  }
}

ElasticRendezvous::ElasticRendezvous(store::Store& store, store::StoreOpener open_store,
                                     ElasticRendezvousOptions options, ElasticNode self,
                                     KeepAliveTiming keep_alive, int max_restarts,
                                     KeepAliveSource* keep_alive_source)
    : store_(store),
      open_store_(std::move(open_store)),
      options_(options),
      self_(std::move(self)),
      keep_alive_(keep_alive),
      max_restarts_(max_restarts),
      keep_alive_source_(keep_alive_source) {}

void ElasticRendezvous::check_settings() {
  if (settings_checked_) return;
  refuse_if_ended(store_, op());
  const auto mine = nlohmann::json{{"host", self_.host},
                                   {"settings", encode_settings(options_.settings)}}
                        .dump();
  nlohmann::json stand;
  try {
    stand = nlohmann::json::parse(store_.compare_set("settings", "", mine, op()));
    if (!stand.is_object()) throw RendezvousError("the job's settings in the store are not a record");
  } catch (const nlohmann::json::exception& e) {
    throw RendezvousError(fmt::format("malformed job settings in the store: {}", e.what()));
  }
  const auto them = fmt::format("the job (first started on {})",
                                stand.value("host", std::string("?")));
  const auto difference =
      describe_difference(options_.settings, decode_settings(stand.value("settings", "[]")), them);
  if (!difference.empty()) {
    throw RendezvousError(fmt::format(
        "this node ({}) was started with settings the job does not share, so it cannot join: {}",
        self_.host, difference));
  }
  settings_checked_ = true;
}

// Round 0 is every job's first; its record appears when it closes. Asked before the first
// join, it names a round this node was not in; a node that found it still open asks again once
// a member of a later round.
std::optional<FirstRound> ElasticRendezvous::closed_first_round() {
  check_settings();
  const auto closed = store_.try_get(news_key(0, "closed"), op());
  if (!closed) return std::nullopt;
  return FirstRound{round_prefix(0), decode_closed(*closed).members};
}

NextRound ElasticRendezvous::next_round(int restart_count) {
  if (round_ < 0) {
    check_settings();
    round_ = current_round(store_, op());
  }
  self_.failures = restart_count;
  while (true) {
    emit("rendezvous_started", {{"round", round_}, {"min_nodes", options_.min_nodes},
                                {"max_nodes", options_.max_nodes}});
    RoundResult joined;
    if (auto settled = std::exchange(settled_, std::nullopt); settled && assignment_) {
      // Closed ahead with the last round's root cause: this node keeps its place, asking
      // nothing of the store.
      joined = member_place(settled->round, assignment_->group_rank, settled->closed,
                            *assignment_, self_.nproc);
      joined.ranks_kept = true;
      round_settled_ = true;
      spdlog::info("rendezvous: round {} closed with the root cause of round {}: the same {} "
                   "nodes, this node keeps group rank {}",
                   joined.round, settled->closed.ranks_of, joined.members,
                   joined.ranks.group_rank);
    } else {
      joined = join_round(store_, round_, self_, options_, assignment_);
      round_settled_ = false;
    }
    if (!joined.member) {
      stop_ring();  // a spare or a latecomer watches nobody; its old ring's members moved on
      if (auto outcome = outsider(joined)) return NextRound{std::nullopt, *outcome};
      round_ = advance_round(store_, round_, op());
      continue;
    }
    Round round;
    round.id = joined.round;
    round.prefix = round_prefix(joined.round);
    round.ranks = joined.ranks;
    round.ranks_kept = joined.ranks_kept;
    assignment_ = RoundAssignment{joined.ranks.group_rank, joined.ranks.base_rank,
                                  joined.successor_host};
    round.restart_count = joined.failures;
    round.master_addr = joined.master_host;
    // The ring's keys, for the heartbeat ring and etcd's leases alike.
    round.ring_prefix = round_prefix(joined.ring_round);
    ring_round_ = joined.ring_round;
    // Only the hosts this node needs: group rank 0's (the master) and the one it watches.
    round.hosts.assign(static_cast<std::size_t>(joined.members), std::string());
    round.hosts[0] = joined.master_host;
    round.hosts[static_cast<std::size_t>((joined.ranks.group_rank + 1) % joined.members)] =
        joined.successor_host;
    emit("rendezvous_completed",
         {{"round", joined.round}, {"world_size", joined.ranks.world_size},
          {"members", joined.members}, {"group_rank", joined.ranks.group_rank},
          {"base_rank", joined.ranks.base_rank}});
    return NextRound{std::move(round), {}};
  }
}

// An elastic round is formed anew, nodes may have joined meanwhile, unless the chooser of the
// last one's root cause closed the next ahead (settle_next_round) and the root cause carried
// it here. What this node was in the last round goes into its next descriptor, for the closer
// to see whether the next round has the same members and can keep the ring.
void ElasticRendezvous::round_ended(const Round& round, const RoundEnd& end) {
  self_.prev_rank = round.ranks.group_rank;
  self_.prev_round = round.id;
  self_.prev_members = round.ranks.group_world_size;
  self_.prev_ring = ring_round_;
  if (end.next_round) {
    try {
      auto settled = decode_settled(*end.next_round);
      if (settled.round == round.id + 1 && settled.closed.ranks_of == round.id &&
          settled.closed.members == round.ranks.group_world_size) {
        settled_ = std::move(settled);
        round_ = round.id + 1;
        return;
      }
      spdlog::warn("rendezvous: the root cause of round {} carries round {} of round {}'s "
                   "members; forming the next round instead",
                   round.id, settled.round, settled.closed.ranks_of);
    } catch (const RendezvousError& e) {
      spdlog::warn("rendezvous: {}; forming the next round instead", e.what());
    }
  }
  round_ = advance_round(store_, round.id, op());
}

// The round a restart moves to, closed ahead by the chooser or formed by the same members;
// a node that joins, leaves or dies meanwhile may make it a later one.
std::string ElasticRendezvous::next_prefix(const Round& round) const {
  return round_prefix(round.id + 1);
}

std::optional<std::string> ElasticRendezvous::settle_next_round(const Round& round,
                                                                int restart_count) {
  ClosedRound next;
  next.members = round.ranks.group_world_size;
  next.world_size = round.ranks.world_size;
  next.failures = restart_count;
  next.master_host = round.master_addr;
  next.ring_round = ring_round_;
  next.ranks_of = round.id;
  // A round closed ahead took no joins from its members; any join is a latecomer's.
  const int joins = round_settled_ ? 0 : next.members;
  auto settled = ddprun::settle_next_round(store_, round.id, next, joins, op());
  if (!settled) return std::nullopt;
  return encode_settled(*settled);
}

std::optional<std::string> ElasticRendezvous::outsider(const RoundResult& r) {
  const auto outcome_key = news_key(r.round, "outcome");
  std::string value;
  if (r.members < options_.max_nodes) {
    spdlog::info("rendezvous: round {} runs with {} nodes; asking them to re-form with this one",
                 r.round, r.members);
    const auto join = agent_failure(self_.host, -1, self_.failures, Failure::Kind::kMembership, 0,
                                    fmt::format("node {} is waiting to join", self_.host));
    value = store_.compare_set(outcome_key, "", join.to_json(), op());
  } else {
    spdlog::info("rendezvous: round {} is full ({} nodes); waiting as a hot spare", r.round,
                 r.members);
    // Re-armed every read timeout, like every other wait on the store: a store whose host
    // vanished without closing the connection leaves the request unanswered, which ends the
    // spare's wait then instead of after an hour.
    while (true) {
      try {
        value = store_.get(outcome_key, op());
        break;
      } catch (const TimeoutError&) {
      }
    }
  }
  if (value == kRoundSucceeded) return value;
  const auto f = Failure::from_json(value);
  const bool job_failed = (f.kind == Failure::Kind::kWorker && r.failures >= max_restarts_) ||
                          f.kind == Failure::Kind::kAgent;
  if (job_failed) return value;
  return std::nullopt;
}

std::unique_ptr<KeepAlive> ElasticRendezvous::keep_alive(const Round& round, LostCallback on_lost,
                                                         ErrorCallback on_error) {
  if (keep_alive_source_) {
    return keep_alive_source_->keep_alive(round, std::move(on_lost), std::move(on_error));
  }
  return ring_.attach(open_store_, round, keep_alive_, std::move(on_lost), std::move(on_error));
}

void ElasticRendezvous::stop_ring() {
  ring_.stop();
  if (keep_alive_source_) keep_alive_source_->stop();
}

void ElasticRendezvous::leave_early(const Round& round) { leave_round(round, store_, op()); }

void ElasticRendezvous::leave_round(const Round& round, store::Store& store, Deadline deadline) {
  stop_ring();  // its next beat would overwrite the mark
  mark_left_on_purpose(store, round, deadline);
}

void ElasticRendezvous::job_ended() { stop_ring(); }

void ElasticRendezvous::record_job_end(const std::string& how, Deadline deadline) {
  ddprun::record_job_end(store_, how, self_.host, deadline);
}

}  // namespace ddprun
