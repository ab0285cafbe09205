#include "rendezvous/job_end.hpp"

#include <ctime>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "store/store.hpp"

namespace ddprun {

using nlohmann::json;

void record_job_end(store::Store& store, const std::string& how, const std::string& host,
                    Deadline deadline) {
  // `how` may quote a worker's bytes (a launch error, a stack frame): not always UTF-8.
  const auto record = json{{"how", how}, {"host", host}, {"unix_time", unix_seconds()}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  try {
    store.compare_set(kJobEndedKey, "", record, deadline);
  } catch (const Error& e) {
    spdlog::warn("rendezvous: could not record the job's end in the store ({}): a node started "
                 "later with this run id is not told that the job ended",
                 e.what());
  }
}

namespace {

// The refusal's line for `record` (record_job_end's JSON).
std::string describe_ended_job(const std::string& record, const std::string& store_name) {
  auto j = json::parse(record, nullptr, false);  // not const: a missing field reads as null
  std::string what = "an unreadable record";
  if (j.is_object() && j["unix_time"].is_number() && j["how"].is_string() &&
      j["host"].is_string()) {
    const auto t = static_cast<std::time_t>(j["unix_time"].get<double>());
    what = fmt::format("at {:%Y-%m-%d %H:%M:%S} UTC ({}, as {} saw it)", fmt::gmtime(t),
                       j["how"].get<std::string>(), j["host"].get<std::string>());
  }
  return fmt::format(
      "the job with this run id ended {}: this node cannot join it, and runs nothing; give a "
      "new job a run id of its own (--rdzv-id) or a store of its own (store at {})",
      what, store_name);
}

}  // namespace

void refuse_if_ended(store::Store& store, Deadline deadline) {
  if (auto record = store.try_get(kJobEndedKey, deadline)) {
    throw RendezvousError(describe_ended_job(*record, store.describe()));
  }
}

}  // namespace ddprun
