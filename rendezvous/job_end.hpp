#pragma once
// The record a job leaves in its store once it has ended for every node ("ended"): how it
// ended, on which node, and when. A node that finds it at its first look cannot have been one
// of that job's: its run id was given again to a store that keeps every run's keys (a
// standalone ddprun-store), or its agent started after the job had ended. Such a node is
// refused with one line that says so, where a static node would otherwise be told that its
// rank cannot join again, and an elastic one would "finish" a job it never ran.

#include <string>

#include "common/deadline.hpp"

namespace ddprun::store {
class Store;
}  // namespace ddprun::store

namespace ddprun {

inline constexpr const char* kJobEndedKey = "ended";

// Records that the job ended (`how`: "succeeded", "failed: rank 1 on b exited with 3", ...),
// as seen by `host`; the first record stays. Never throws: a store that cannot be written at
// the job's end is said in the log (a node that comes later is then not told).
void record_job_end(store::Store& store, const std::string& how, const std::string& host,
                    Deadline deadline);

// Throws RendezvousError when the job of the store's run id has ended, naming how and when.
void refuse_if_ended(store::Store& store, Deadline deadline);

}  // namespace ddprun
