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
  const auto record =
      json{{"how", how}, {"host", host}, {"unix_time", unix_seconds()}}.dump();
  try {
    store.compare_set(kJobEndedKey, "", record, deadline);
  } catch (const Error& e) {
    spdlog::debug("rendezvous: could not record the job's end in the store: {}", e.what());
  }
}

std::string describe_ended_job(const std::string& record, const std::string& store_name) {
  const auto j = json::parse(record, nullptr, false);
  std::string what = "an unreadable record";
  if (j.is_object()) {
    const auto t = static_cast<std::time_t>(j.value("unix_time", 0.0));
    what = fmt::format("at {:%Y-%m-%d %H:%M:%S} UTC ({}, as {} saw it)", fmt::gmtime(t),
                       j.value("how", std::string("ended")), j.value("host", std::string("?")));
  }
  return fmt::format(
      "the job with this run id ended {}: this node cannot join it, and runs nothing; give a "
      "new job a run id of its own (--rdzv-id) or a store of its own (store at {})",
      what, store_name);
}

void refuse_if_ended(store::Store& store, Deadline deadline) {
  if (auto record = store.try_get(kJobEndedKey, deadline)) {
    throw RendezvousError(describe_ended_job(*record, store.describe()));
  }
}

}  // namespace ddprun
