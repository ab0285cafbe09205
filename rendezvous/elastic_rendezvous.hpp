#pragma once
// Elastic rendezvous (--rdzv-backend=c10d, --nnodes=MIN:MAX) over the store, in rounds.
//
// A node takes a join slot in the current round with one atomic add and publishes its
// descriptor under that slot. The MAX-th joiner closes the round at once; once MIN have joined,
// every joiner from the MIN-th on waits out the last-call window and then closes the round
// (compare_set: the first closer wins). The closer assigns ranks to the slots that published a
// descriptor (a joiner that died half-way is left out) and writes each its assignment. Later
// joiners are too late for this round. Total traffic is O(n): one add and one set per node,
// one multi_get and one multi_set by the closer, two small reads per node, and server-side
// waits.
//
// Group ranks are deterministic: nodes that were members of the previous round keep their
// relative order, newcomers follow in join order (order_members, a pure function). A round
// whose members are exactly the last round's keeps that round's keep-alive ring (kept_ring):
// the closer says so in "closed", so every member decides alike, and a recovery after a worker
// failure forms no ring anew.
//
// After a failure that every member settled, when the job restarts and nobody waits to join,
// the node that chose the root cause closes the next round ahead (settle_next_round): the same
// members in the same places, the same ring. The root cause carries that round to every
// member, which takes its place without a request of its own. Its claim ("closing") holds the
// record, which a joiner publishes when the chooser did not (complete_settled).
//
// As a RendezvousHandler (ElasticRendezvous): a node that comes while a round runs asks its
// members to re-form with it (it writes a membership record to the round's outcome); beyond
// MAX it waits as a hot spare for the round to end. Losing a node re-forms the round.
//
// Keys (in the run id's namespace): "round" (the current round number), and per round r:
// "r/<r>/join" (counter), "r/<r>/node/<slot>" (descriptor), "r/<r>/closing" (the closer's
// claim: its id and a count, or a round closed ahead's record),
// "r/<r>/assign/<claim>/<slot>" (a member's group rank and base rank; "assign/<slot>" for a
// round closed ahead), "news/r/<r>/closed" (member count, world size, restart count, master
// host, the ring kept, the closer's claim: JSON), "r/<r>/hb/<g>" (the ring of round r, also for
// the later rounds that keep it).
//
// A closer lost half-way leaves its claim behind: a waiting node takes it over once it has not
// moved for claim_stale_after, and closes the round itself.

#include <optional>
#include <string>
#include <vector>

#include "common/deadline.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/job_settings.hpp"
#include "rendezvous/rank_assignment.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/round_records.hpp"
#include "store/store.hpp"

namespace ddprun {

struct ElasticRendezvousOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds last_call_timeout{30'000};
  std::chrono::milliseconds read_timeout{60'000};
  std::chrono::milliseconds progress_interval{10'000};  // see common/progress.hpp
  // A claim to close a round that has not moved for this long belongs to a node that was lost
  // while it closed: another node takes it over (see RoundJoin::repair_claim).
  std::chrono::milliseconds claim_stale_after{20'000};
  // What every node must share with the job (see agreed_settings): the first node's stand. A
  // node that differs is refused, and the job goes on without it: elastic membership lets a
  // job continue when a node cannot join.
  JobSettings settings;
};

struct RoundResult {
  int round = 0;
  bool member = false;  // false: the round closed without this node (too late, or a spare)
  int slot = 0;
  int members = 0;      // how many nodes the round has
  int failures = 0;     // restart count the round starts with (max over its members)
  int ring_round = 0;   // the round whose keep-alive ring this one uses (itself, or kept)
  bool ranks_kept = false;  // this node has the ranks it had in its last round
  NodeRanks ranks;               // valid when member
  std::string master_host;       // group rank 0's address (MASTER_ADDR)
  std::string successor_host;    // the member this node watches (group rank + 1)
};

// A node that published its descriptor in a closing round, and the join slot it took.
struct RoundCandidate {
  int slot = 0;
  ElasticNode node;
};

// A member's place in a closed round.
struct RoundMember {
  int slot = 0;
  std::string host;
  NodeRanks ranks;
  std::string successor_host;  // the member it watches: group rank + 1, wrapping around
};

// Orders a closing round's candidates into members: nodes of the previous round first, in
// their old order; newcomers after them, in join (slot) order. Ranks are prefix sums of the
// worker counts in that order (assign_all_ranks). Pure; throws ConfigError on a bad nproc.
std::vector<RoundMember> order_members(std::vector<RoundCandidate> candidates);

// The round whose keep-alive ring a closing round with these candidates keeps, or -1 to form
// its own: every candidate was a member of the same last round, which had exactly this many
// members, each at a different group rank (so order_members gives each the group rank it had),
// and used the same ring. Pure.
int kept_ring(const std::vector<RoundCandidate>& candidates);

// The round a newcomer should join now.
int current_round(store::Store& store, Deadline deadline);

// Joins round `round` and returns once it closed. Throws TimeoutError naming the round and how
// many nodes joined when it does not close within the join timeout. `previous`: this node's
// place in its last round (`self.prev_round`), which it keeps when the round closes with the
// same members (ClosedRound::ranks_of) without reading its assignment.
RoundResult join_round(store::Store& store, int round, const ElasticNode& self,
                       const ElasticRendezvousOptions& options,
                       const std::optional<RoundAssignment>& previous = std::nullopt);

// The next round closed ahead by the node that chose round `round`'s root cause, every member
// back and the job restarting: round `round + 1` with `next` (the same members in the same
// places), so that no member joins it with requests of its own (a recovery's next round then
// costs the store a few requests in all, not four per node). nullopt when a node waits to join
// (round `round` took other than `joins` joins: its member count when it formed, 0 when it was
// closed ahead itself) or a joiner claimed `round + 1` first: that round then forms as usual.
// The claim (its "closing") holds the whole record, which publish_settled makes the round's.
std::optional<SettledRound> settle_next_round(store::Store& store, int round,
                                              const ClosedRound& next, int joins,
                                              Deadline deadline);
// Publishes a round closed ahead: the round's record, then the round number. A node waiting
// for a round whose claim holds such a record but that was never published calls it too.
// False when another record of the round was published first (a joiner's closer, slow): that
// one is the round's, and nothing is written.
bool publish_settled(store::Store& store, const SettledRound& settled, Deadline deadline);

// Moves the job on from round `round`; returns the round to join next (later than `round`).
int advance_round(store::Store& store, int round, Deadline deadline);

// "r/<round>": where round `round`'s keys live.
std::string round_prefix(int round);
std::string round_key(int round, const std::string& name);
// "news/r/<round>/<name>": a key of round `round` that every node waits for (kNewsPrefix).
std::string news_key(int round, const std::string& name);

class ElasticRendezvous final : public RendezvousHandler {
 public:
  // How a round's members watch each other when the store offers better than the heartbeat
  // ring (etcd's leases), kept across rounds like the ring.
  class KeepAliveSource {
   public:
    virtual ~KeepAliveSource() = default;
    // The keep-alive of `round` (nullptr for a round of one node).
    virtual std::unique_ptr<KeepAlive> keep_alive(const Round& round, LostCallback on_lost,
                                                  ErrorCallback on_error) = 0;
    // This node watches nobody from now on (a spare, a node that left, the job's end).
    virtual void stop() = 0;
  };

  // `store` is the agent's own connection (used from its thread only). `max_restarts` tells a
  // spare whether a failed round was the job's last. Without `keep_alive_source`, the members
  // watch each other with the heartbeat ring (RingKeeper); either way a round's ring lives
  // under its Round::keep_alive_prefix, the kept round's when the closer kept one.
  ElasticRendezvous(store::Store& store, store::StoreOpener open_store, ElasticRendezvousOptions options,
                    ElasticNode self, KeepAliveTiming keep_alive, int max_restarts,
                    KeepAliveSource* keep_alive_source = nullptr);

  NextRound next_round(int restart_count) override;
  std::optional<FirstRound> closed_first_round() override;
  void round_ended(const Round& round, const RoundEnd& end) override;
  std::optional<std::string> settle_next_round(const Round& round, int restart_count) override;
  std::string next_prefix(const Round& round) const override;
  std::unique_ptr<KeepAlive> keep_alive(const Round& round, LostCallback on_lost,
                                        ErrorCallback on_error) override;
  void leave_early(const Round& round) override;
  void leave_round(const Round& round, store::Store& store, Deadline deadline) override;
  void job_ended() override;
  void record_job_end(const std::string& how, Deadline deadline) override;
  bool can_reform() const override { return true; }

 private:
  // This node is not in the round: it came too late, or the round is full (a hot spare).
  // Returns the job's final outcome when the job is over, nullopt to join the next round.
  std::optional<std::string> outsider(const RoundResult& result);
  Deadline op() const { return Deadline::after(options_.read_timeout); }
  // Refuses this node when the job was started with other settings (options_.settings); once.
  void check_settings();
  void stop_ring();

  store::Store& store_;
  store::StoreOpener open_store_;
  ElasticRendezvousOptions options_;
  ElasticNode self_;
  KeepAliveTiming keep_alive_;
  int max_restarts_ = 0;
  KeepAliveSource* keep_alive_source_;
  bool settings_checked_ = false;
  int round_ = -1;  // the round to join next; -1: not looked up yet
  int ring_round_ = -1;  // the ring of the round this node is a member of
  std::optional<RoundAssignment> assignment_;  // this node's place in that round
  // The next round, closed ahead and carried by the last round's root cause (round_ended).
  std::optional<SettledRound> settled_;
  bool round_settled_ = false;  // the round this node is a member of was closed ahead

  RingKeeper ring_;
};

}  // namespace ddprun
