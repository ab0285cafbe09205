#include "rendezvous/static_rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/progress.hpp"
#include "common/random.hpp"
#include "rendezvous/job_end.hpp"
#include "store/prefix_store.hpp"

namespace ddprun {

using nlohmann::json;

namespace {

std::string info_key(int g) { return fmt::format("static/node/{}/info", g); }

constexpr const char* kAbortKey = "static/abort";
constexpr const char* kSettingsKey = "static/settings";
// The keep-alive ring's keys are the job's, not an attempt's ("static/hb/<g>").
constexpr const char* kRingPrefix = "static";
// How many nodes have written their record, and the key set once all have (or to end the
// rendezvous): each node waits on this one key, not on every node's record (N waits of N keys
// each would hold N^2 waiters in the store's host: 1M at 1,024 nodes). The key only wakes the
// nodes; what they do is decided from the records, where a marker never replaces a real one.
constexpr const char* kJoinedKey = "static/joined";
// How many nodes learnt that the rendezvous was ended for all: the store's host waits for the
// nodes that joined before it goes, and its store with it.
constexpr const char* kAbortSeenKey = "static/abort_seen";
constexpr std::chrono::seconds kAbortSeenWait{5};
constexpr const char* kAllJoinedKey = "static/all_joined";

std::string counted_key(int g) { return fmt::format("static/node/{}/counted", g); }

// A node's signs of life before its workers start (the keep-alive ring takes over from there):
// a counter it adds to at once when it claims its rank, then every claim_beat while it waits.
// A rank whose holder's counter stands still for kBeatsMissed beats is free to be taken again:
// its agent was killed while it waited, and the same command started again takes its place.
std::string alive_key(int g) { return fmt::format("static/node/{}/alive", g); }
constexpr int kBeatsMissed = 3;

// An attempt's keys: its start barrier, and the agents' round under it.
std::string attempt_prefix(int attempt) { return fmt::format("attempt/{}", attempt); }

// Counts this node among the joined once (a node started again with the same record is not
// counted twice), and wakes every node when the count is full.
void count_joined(store::Store& store, int node_rank, int nnodes, Deadline deadline) {
  if (store.add(counted_key(node_rank), 1, deadline) != 1) return;
  if (store.add(kJoinedKey, 1, deadline) >= nnodes) {
    store.compare_set(kAllJoinedKey, "", "all", deadline);
  }
}

// Ends the rendezvous for every node of the job: the first reason given stands, and every
// node's record still empty is filled with a marker, then the waiting nodes are woken: each
// reads the records, finds a marker and the reason, instead of waiting out its join timeout.
[[noreturn]] void abort_for_all(store::Store& store, int nodes, const std::string& why,
                                Deadline deadline) {
  const auto reason = store.compare_set(kAbortKey, "", why, deadline);
  const auto marker = json{{"abort", true}}.dump();
  // A node count from another node's command line: bounded, and one key the store refuses
  // does not keep the others from being marked.
  for (int g = 0; g < std::min(nodes, 1 << 16); ++g) {
    try {
      store.compare_set(info_key(g), "", marker, deadline);
    } catch (const RendezvousError&) {
      throw;
    } catch (const Error& e) {
      spdlog::warn("rendezvous: could not mark node {}'s record to end the rendezvous: {}", g,
                   e.what());
    }
  }
  try {
    store.compare_set(kAllJoinedKey, "", "abort", deadline);
  } catch (const RendezvousError&) {
    throw;
  } catch (const Error& e) {
    spdlog::warn("rendezvous: could not wake the waiting nodes to end the rendezvous: {}",
                 e.what());
  }
  throw RendezvousError(reason);
}

std::string node_name(int rank, const std::string& host) {
  return fmt::format("node {} ({})", rank, host);
}

// Compares this node's settings with the job's (the first node's to arrive), which it sets when
// it is that node.
void agree_on_settings(store::Store& store, const StaticRendezvousOptions& o, int nodes,
                       Deadline deadline) {
  const auto mine =
      json{{"node", o.node_rank}, {"host", o.self.host}, {"settings", encode_settings(o.settings)}}
          .dump();
  json stand;
  try {
    stand = json::parse(store.compare_set(kSettingsKey, "", mine, deadline));
    if (!stand.is_object()) throw RendezvousError("the job's settings in the store are not a record");
  } catch (const json::exception& e) {
    throw RendezvousError(fmt::format("malformed job settings in the store: {}", e.what()));
  }
  const auto theirs = decode_settings(stand.value("settings", "[]"));
  const auto difference = describe_difference(
      o.settings, theirs,
      node_name(stand.value("node", -1), stand.value("host", std::string("?"))));
  if (!difference.empty()) {
    abort_for_all(store, nodes,
                  fmt::format("the nodes were started with different settings: {} has {}",
                              node_name(o.node_rank, o.self.host), difference),
                  deadline);
  }
}

bool is_marker(const std::string& record) {
  const auto j = json::parse(record, nullptr, false);
  return j.is_object() && j.value("abort", false);
}

// The worker count in node `g`'s record; -1 when it has none (or a marker).
int recorded_nproc(store::Store& store, int g, Deadline deadline) {
  const auto record = json::parse(store.try_get(info_key(g), deadline).value_or(""), nullptr, false);
  return record.is_object() ? record.value("nproc", -1) : -1;
}

std::string started_key() { return attempt_prefix(0) + "/go"; }

// Claims this node's rank (owner_key). A rank whose holder shows no sign of life for
// kBeatsMissed beats, before the job's workers first started, is taken over; one whose holder
// lives is claimed twice (a duplicate --node-rank), so the job cannot form: every node learns
// it at once, unless the job already formed, when only this node is refused.
void claim_rank(store::Store& store, const StaticRendezvousOptions& o, const std::string& token,
                Deadline deadline) {
  const int g = o.node_rank;
  const auto started = Clock::now();
  const auto cannot_rejoin = fmt::format(
      "node rank {} cannot join again: the job's workers have started without it; a static job "
      "takes no node back then: start the whole job again", g);
  auto owner = store.compare_set(owner_key(g), "", token, deadline);
  while (owner != token) {
    const auto window = o.claim_beat * kBeatsMissed;
    const auto before = store.add(alive_key(g), 0, deadline);
    try {
      store.wait({kAbortKey}, Deadline::after(window).min(deadline));
      throw RendezvousError(store.get(kAbortKey, deadline));
    } catch (const TimeoutError&) {
      if (deadline.expired()) {
        throw TimeoutError(fmt::format("rendezvous timed out after {} waiting to take node rank "
                                       "{} from {}; store at {}",
                                       format_duration(Clock::now() - started), g, owner,
                                       store.describe()));
      }
    }
    const bool formed = store.check({kAllJoinedKey}, deadline);
    if (store.check({started_key()}, deadline)) throw RendezvousError(cannot_rejoin);
    if (store.add(alive_key(g), 0, deadline) != before) {
      const auto why = fmt::format(
          "node rank {} is already taken by {}, which is alive; every node needs its own "
          "--node-rank in 0..{}", g, owner, o.nnodes - 1);
      if (formed) throw RendezvousError(why);
      abort_for_all(store, o.nnodes, why, deadline);
    }
    // The job formed with the lost agent's record: its ranks were counted from its workers.
    if (const int nproc = recorded_nproc(store, g, deadline);
        formed && nproc >= 0 && nproc != o.self.local_world_size) {
      throw RendezvousError(fmt::format(
          "node rank {} joined the job with {} worker(s) before its agent was lost; this node "
          "has {}: start it with --nproc-per-node={}", g, nproc, o.self.local_world_size, nproc));
    }
    const auto was = std::exchange(owner, store.compare_set(owner_key(g), owner, token, deadline));
    if (owner == token) {
      // The workers may have started between the look above and the take-over: the lost
      // holder, had it been alive after all, checks its claim once they have (start_barrier).
      if (store.check({started_key()}, deadline)) throw RendezvousError(cannot_rejoin);
      spdlog::warn("rendezvous: node rank {} was held by {}, which showed no sign of life for {}: "
                   "this node takes its place", g, was, format_duration(window));
    }
  }
  store.add(alive_key(g), 1, deadline);
}

// Throws when node `g`'s rank is no longer this node's (`token`): a stall here looked like
// death, and a newcomer took it; two nodes must never run with one rank.
void check_still_holds(store::Store& store, int g, const std::string& token, Deadline deadline) {
  if (const auto owner = store.get(owner_key(g), deadline); owner != token) {
    throw RendezvousError(fmt::format("node rank {} was taken over by {} while this node showed "
                                      "no sign of life", g, owner));
  }
}

// Publishes this node's record, in place of the record of an agent it took the rank over from;
// never over an abort's marker (a node that ended the rendezvous has the last word), nor once
// another node took this one's rank (a stall here looked like death).
void publish_record(store::Store& store, const StaticRendezvousOptions& o,
                    const std::string& token, Deadline deadline) {
  const auto info =
      json{{"host", o.self.host}, {"nproc", o.self.local_world_size}, {"pid", o.self.pid}}.dump();
  const auto key = info_key(o.node_rank);
  auto current = store.compare_set(key, "", info, deadline);
  while (current != info) {
    if (is_marker(current)) {
      throw RendezvousError(
          store.try_get(kAbortKey, deadline).value_or("another node ended the rendezvous"));
    }
    check_still_holds(store, o.node_rank, token, deadline);
    current = store.compare_set(key, current, info, deadline);
  }
}

}  // namespace

std::string make_claim_token(const NodeInfo& self) {
  return fmt::format("{} pid {} ({})", self.host, self.pid, random_hex(4));
}

std::string owner_key(int node_rank) { return fmt::format("static/node/{}/owner", node_rank); }

RendezvousResult static_rendezvous(store::Store& store, const StaticRendezvousOptions& o) {
  const auto start = Clock::now();
  const auto deadline = Deadline::after(o.join_timeout);
  refuse_if_ended(store, deadline);
  if (auto reason = store.try_get(kAbortKey, deadline)) throw RendezvousError(*reason);
  const std::string nnodes = std::to_string(o.nnodes);
  auto agreed = store.compare_set("static/nnodes", "", nnodes, deadline);
  if (agreed != nnodes) {
    const int theirs = std::atoi(agreed.c_str());
    abort_for_all(store, std::max(o.nnodes, theirs),
                  fmt::format("the nodes were started with different node counts: {} has "
                              "--nnodes={}, the first node to arrive --nnodes={} (store at {})",
                              node_name(o.node_rank, o.self.host), o.nnodes, agreed,
                              store.describe()),
                  deadline);
  }
  agree_on_settings(store, o, o.nnodes, deadline);

  const auto token = o.token.empty() ? make_claim_token(o.self) : o.token;
  claim_rank(store, o, token, deadline);
  publish_record(store, o, token, deadline);
  count_joined(store, o.node_rank, o.nnodes, deadline);
  std::vector<std::string> keys;
  for (int g = 0; g < o.nnodes; ++g) keys.push_back(info_key(g));
  if (o.nnodes > 1) {
    spdlog::info("rendezvous: node {} of {} joined; waiting for the others (store at {})",
                 o.node_rank, o.nnodes, store.describe());
  }
  auto missing_ranks = [&] {
    std::vector<int> missing;
    for (int g = 0; g < o.nnodes; ++g) {
      // A look at a thousand records is a thousand requests: alive meanwhile too.
      if (g % 128 == 127) store.add(alive_key(o.node_rank), 1, deadline);
      if (!store.check({info_key(g)}, Deadline::after(std::chrono::seconds(5)))) {
        missing.push_back(g);
      }
    }
    return missing;
  };
  ProgressClock progress(o.progress_interval);
  auto repairs = ProgressClock::every(repair_pace(o.progress_interval));
  while (true) {
    try {
      store.wait({kAllJoinedKey}, progress.slice(deadline).min(Deadline::after(o.claim_beat)));
      break;
    } catch (const TimeoutError&) {
      if (deadline.expired()) {
        const auto missing = missing_ranks();
        throw TimeoutError(fmt::format(
            "rendezvous timed out after {}: {}/{} nodes joined (missing node ranks {}); store at {}",
            format_duration(Clock::now() - start), o.nnodes - static_cast<int>(missing.size()),
            o.nnodes, missing, store.describe()));
      }
    }
    store.add(alive_key(o.node_rank), 1, deadline);
    const bool say = progress.due();
    if (!repairs.due() && !say) continue;
    // The node whose count filled it may have died before it woke the others.
    if (store.add(kJoinedKey, 0, deadline) >= o.nnodes) {
      store.compare_set(kAllJoinedKey, "", "all", deadline);
      continue;
    }
    const auto missing = missing_ranks();
    // Every record is there, yet the count is short: a node was lost between counting itself
    // and adding to the count, and the one that took its rank was not counted again.
    if (missing.empty()) {
      store.compare_set(kAllJoinedKey, "", "all", deadline);
      continue;
    }
    if (say) {
      spdlog::info("rendezvous: {}/{} nodes joined, missing node ranks {}; {} (store at {})",
                   o.nnodes - static_cast<int>(missing.size()), o.nnodes, missing,
                   progress.elapsed_of(o.join_timeout), store.describe());
    }
  }

  // A node that showed no sign of life for a while (a stalled connection) may have lost its
  // rank to a newcomer.
  check_still_holds(store, o.node_rank, token, deadline);
  RendezvousResult result;
  std::vector<int> sizes;
  for (const auto& text : store.multi_get(keys, deadline)) {
    try {
      auto j = json::parse(text);
      if (j.value("abort", false)) {
        throw RendezvousError(store.try_get(kAbortKey, deadline).value_or(
            "another node ended the rendezvous"));
      }
      NodeInfo n{j.at("host").get<std::string>(), j.at("nproc").get<int>(),
                 j.at("pid").get<int>()};
      sizes.push_back(n.local_world_size);
      result.nodes.push_back(std::move(n));
    } catch (const json::exception& e) {
      throw RendezvousError(fmt::format("malformed node record '{}' in the store: {}", text,
                                        e.what()));
    }
  }
  result.ranks = assign_ranks(sizes, o.node_rank);
  spdlog::info("rendezvous: complete in {}: {} nodes, {} workers, this node's ranks {}..{}",
               format_duration(Clock::now() - start), o.nnodes, result.ranks.world_size,
               result.ranks.base_rank,
               result.ranks.base_rank + result.ranks.local_world_size - 1);
  return result;
}

StaticRendezvous::StaticRendezvous(store::Store& store, store::StoreOpener open_store,
                                   StaticRendezvousOptions options, std::string master_addr,
                                   KeepAliveTiming keep_alive)
    : store_(store),
      open_store_(std::move(open_store)),
      options_(std::move(options)),
      master_addr_(std::move(master_addr)),
      keep_alive_(keep_alive) {
  if (options_.token.empty()) options_.token = make_claim_token(options_.self);
}

void StaticRendezvous::join() {
  emit("rendezvous_started", {{"node_rank", options_.node_rank}, {"nnodes", options_.nnodes}});
  try {
    joined_ = static_rendezvous(store_, options_);
  } catch (const RendezvousError&) {
    wait_for_abort_seen();
    throw;
  } catch (const InterruptedError&) {
    // Give the node rank back, so that this node can be started again without a new store.
    try {
      auto store = open_store_(Deadline::after(std::chrono::seconds(2)));
      store->compare_set(owner_key(options_.node_rank), options_.token, "",
                         Deadline::after(std::chrono::seconds(2)));
    } catch (const std::exception& e) {
      spdlog::warn("could not release node rank {}: {}", options_.node_rank, e.what());
    }
    throw;
  }
  emit("rendezvous_completed", {{"world_size", joined_->ranks.world_size},
                                {"base_rank", joined_->ranks.base_rank},
                                {"local_world_size", joined_->ranks.local_world_size}});
}

// A rendezvous ended for every node (a duplicate node rank, settings that differ) is learnt by
// each from the store. The node whose agent serves it waits, briefly, until the nodes that had
// joined have read why: its store closing first would tell them only that it was gone.
void StaticRendezvous::wait_for_abort_seen() {
  try {
    const auto deadline = Deadline::after(kAbortSeenWait);
    if (!store_.try_get(kAbortKey, deadline)) return;  // not an abort: nothing to wait for
    // Only the holders of node ranks count (a duplicate's second agent holds none).
    if (store_.try_get(owner_key(options_.node_rank), deadline) != options_.token) return;
    const auto seen = store_.add(kAbortSeenKey, 1, deadline);
    store_.set(fmt::format("{}/{}", kAbortSeenKey, seen), "", deadline);  // wakes the waiter
    if (!options_.serves_store) return;
    const auto joined = store_.add(kJoinedKey, 0, deadline);
    for (auto now = seen; now < joined; now = store_.add(kAbortSeenKey, 0, deadline)) {
      store_.wait({fmt::format("{}/{}", kAbortSeenKey, now + 1)}, deadline);
    }
  } catch (const Error& e) {
    // A node that never reads it costs kAbortSeenWait, and this node goes on ending.
    spdlog::debug("rendezvous: waiting for the other nodes to learn of the end: {}", e.what());
  }
}

// Every node arrives; the last one to arrive opens the gate. After a restart that every node
// settled, no node counts or waits here. A node that did not learn of that restart (its read of
// the root cause timed out) still comes here and waits; the node that chose the root cause has
// opened the gate for it (round_ended).
void StaticRendezvous::start_barrier(const std::string& prefix, int attempt) {
  store::PrefixStore round(prefix, store_);
  const auto op = [&] { return Deadline::after(options_.join_timeout); };
  const int nodes = joined_->ranks.group_world_size;
  const int g = options_.node_rank;
  // Each rank arrives once: a node that took over the rank of one that had arrived and was
  // lost does not count twice.
  const bool first = round.add(fmt::format("node/{}/arrived", g), 1, op()) == 1;
  const auto arrived = round.add("arrived", first ? 1 : 0, op());
  if (arrived == nodes) round.set("go", "1", op());
  const auto deadline = op();
  const auto started = Clock::now();
  ProgressClock progress(options_.progress_interval);
  auto repairs = ProgressClock::every(repair_pace(options_.progress_interval));
  while (true) {
    try {
      round.wait({"go"}, progress.slice(deadline).min(Deadline::after(options_.claim_beat)));
      break;
    } catch (const TimeoutError&) {
      if (deadline.expired()) {
        throw TimeoutError(fmt::format(
            "attempt {}: not every node came back to start workers within {}: {}/{} are back",
            attempt, format_duration(Clock::now() - started), round.add("arrived", 0, op()),
            nodes));
      }
    }
    // Alive while it waits for the others, so that no newcomer takes its rank.
    store_.add(alive_key(g), 1, op());
    const bool say = progress.due();
    if (!repairs.due() && !say) continue;
    const auto back = round.add("arrived", 0, op());
    if (back >= nodes && !round.check({"go"}, op())) {
      // The node whose arrival completed the count was lost before it opened the gate: the
      // workers start, and the keep-alive ring then names the lost node.
      spdlog::warn("attempt {}: all {} nodes are back but the gate was never opened (the node "
                   "that came back last was lost before it opened it); opening it",
                   attempt, nodes);
      round.compare_set("go", "", "1", op());
      break;
    }
    if (say) {
      spdlog::info("attempt {}: {}/{} nodes are back to start workers; {}", attempt, back, nodes,
                   progress.elapsed_of(options_.join_timeout));
    }
  }
  // Until the first workers start a stalled node may lose its rank to a newcomer: once they
  // have, none can take it (claim_rank), and this is the last look.
  if (attempt == 0) check_still_holds(store_, g, options_.token, op());
}

// After a worker failure every node stops its workers, then counts itself settled, and the
// root cause is chosen once every node has: that count is already the barrier the next attempt
// would wait in, so it is not passed twice (an add, a wait and a wake-up per node on the
// recovery's path). A node that does not come back after all (a signal) is missed by the
// keep-alive of the next attempt, as one that dies later would be.
void StaticRendezvous::round_ended(const Round& round, const RoundEnd& end) {
  all_back_for_.reset();
  if (!end.all_stopped) return;
  all_back_for_ = round.restart_count + 1;
  if (!end.chose_root_cause) return;
  try {
    store::PrefixStore next(attempt_prefix(round.restart_count + 1), store_);
    next.set("go", "1", Deadline::after(options_.join_timeout));
  } catch (const Error& e) {
    // Only a node that missed the root cause waits at the gate; the job goes on without it
    // being opened, and such a node then fails saying who did not come back.
    spdlog::warn("attempt {}: could not open the start barrier for a node that missed the root "
                 "cause: {}", round.restart_count + 1, e.what());
  }
}

std::string StaticRendezvous::next_prefix(const Round& round) const {
  return attempt_prefix(round.restart_count + 1);
}

NextRound StaticRendezvous::next_round(int restart_count) {
  if (!joined_) join();
  Round round;
  round.id = restart_count;
  round.prefix = attempt_prefix(restart_count);
  round.ranks = joined_->ranks;
  round.ranks_kept = true;
  round.restart_count = restart_count;
  round.master_addr = master_addr_;
  round.ring_prefix = kRingPrefix;
  for (const auto& node : joined_->nodes) round.hosts.push_back(node.host);
  if (all_back_for_ != restart_count) start_barrier(round.prefix, restart_count);
  all_back_for_.reset();
  return NextRound{std::move(round), {}};
}

std::unique_ptr<KeepAlive> StaticRendezvous::keep_alive(const Round& round, LostCallback on_lost,
                                                        ErrorCallback on_error) {
  return ring_.attach(open_store_, round, keep_alive_, std::move(on_lost), std::move(on_error));
}

void StaticRendezvous::leave_early(const Round& round) {
  ring_.stop();  // its next beat would overwrite the mark
  mark_left_on_purpose(store_, round, Deadline::after(keep_alive_.read_timeout));
}

void StaticRendezvous::job_ended() { ring_.stop(); }

void StaticRendezvous::record_job_end(const std::string& how, Deadline deadline) {
  ddprun::record_job_end(store_, how, options_.self.host, deadline);
}

}  // namespace ddprun
