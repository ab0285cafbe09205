#include "agent/status_board.hpp"

#include <unistd.h>

#include <atomic>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "common/version.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun {

using nlohmann::json;

struct StatusBoard::LastLine {
  std::mutex mutex;
  std::string text;
  std::atomic<double> when{0};  // unix seconds; 0: nothing yet
};

namespace {

// Cut at a character boundary: a line cut inside a UTF-8 sequence would make invalid JSON.
std::string cut_line(std::string_view line, std::size_t max) {
  if (line.size() <= max) return std::string(line);
  std::size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) --end;
  return std::string(line.substr(0, end));
}

std::string failure_kind(const json& cause) {
  const auto kind = static_cast<Failure::Kind>(cause.value("kind", 0));
  switch (kind) {
    case Failure::Kind::kWorker:
      return cause.value("signal", 0) != 0 ? "signal" : "exit_code";
    case Failure::Kind::kHang:
      return "hang";
    case Failure::Kind::kMembership:
      return "membership";
    case Failure::Kind::kSignal:
      return "stopped";
    case Failure::Kind::kAgent:
      return cause.value("lost_node", -1) >= 0 ? "node_lost" : "agent";
  }
  return "agent";
}

}  // namespace

json NodeStatus::to_json() const {
  json ranks_json = json::array();
  for (const auto& r : ranks) {
    json row = {{"rank", r.rank}, {"local_rank", r.local_rank}, {"pid", r.pid},
                {"state", r.state}, {"last_output_age", r.last_output_age},
                {"last_line", r.last_line}};
    if (r.cpu_seconds >= 0) row["cpu_seconds"] = r.cpu_seconds;
    if (r.cpu_percent >= 0) row["cpu_percent"] = r.cpu_percent;
    if (r.rss_bytes >= 0) row["rss_bytes"] = r.rss_bytes;
    ranks_json.push_back(std::move(row));
  }
  json out = {{"run_id", run_id}, {"backend", backend}, {"host", host}, {"version", version},
          {"agent_pid", agent_pid}, {"node", node}, {"nodes", nodes},
          {"world_size", world_size}, {"round", round}, {"state", state},
          {"restarts", restarts}, {"max_restarts", max_restarts},
          {"membership_changes", membership_changes}, {"rounds", rounds},
          {"rendezvous_seconds", rendezvous_seconds}, {"failures", failures},
          {"started", started}, {"updated", updated}, {"ended", ended},
          {"exit_code", exit_code}, {"ranks", std::move(ranks_json)}};
  if (!node_check.is_null()) out["node_check"] = node_check;
  return out;
}

NodeStatus NodeStatus::from_json(const json& j) {
  try {
    NodeStatus s;
    s.run_id = j.at("run_id").get<std::string>();
    s.backend = j.at("backend").get<std::string>();
    s.host = j.at("host").get<std::string>();
    s.version = j.value("version", "");
    s.agent_pid = j.at("agent_pid").get<int>();
    s.node = j.at("node").get<int>();
    s.nodes = j.at("nodes").get<int>();
    s.world_size = j.at("world_size").get<int>();
    s.round = j.at("round").get<int>();
    s.state = j.at("state").get<std::string>();
    s.restarts = j.at("restarts").get<int>();
    s.max_restarts = j.at("max_restarts").get<int>();
    s.membership_changes = j.at("membership_changes").get<int>();
    s.rounds = j.at("rounds").get<int>();
    s.rendezvous_seconds = j.at("rendezvous_seconds").get<double>();
    s.failures = j.at("failures").get<std::map<std::string, int>>();
    s.started = j.at("started").get<double>();
    s.updated = j.at("updated").get<double>();
    s.ended = j.at("ended").get<std::string>();
    s.exit_code = j.at("exit_code").get<int>();
    // Another agent's: kept only in the shape this ddprun writes, an object.
    if (const auto it = j.find("node_check"); it != j.end() && it->is_object()) s.node_check = *it;
    for (const auto& row : j.at("ranks")) {
      RankStatus r;
      r.rank = row.at("rank").get<int>();
      r.local_rank = row.at("local_rank").get<int>();
      r.pid = row.at("pid").get<int>();
      r.state = row.at("state").get<std::string>();
      r.last_output_age = row.at("last_output_age").get<double>();
      r.last_line = row.at("last_line").get<std::string>();
      r.cpu_seconds = row.value("cpu_seconds", -1.0);
      r.cpu_percent = row.value("cpu_percent", -1.0);
      r.rss_bytes = row.value("rss_bytes", std::int64_t{-1});
      s.ranks.push_back(std::move(r));
    }
    return s;
  } catch (const json::exception& e) {
    throw Error(fmt::format("malformed node status record: {}", e.what()));
  }
}

StatusBoard::StatusBoard(std::string run_id, std::string backend, std::string host,
                         int max_restarts) {
  status_.run_id = std::move(run_id);
  status_.backend = std::move(backend);
  status_.host = std::move(host);
  status_.version = ddprun_version();
  status_.agent_pid = static_cast<int>(getpid());
  status_.max_restarts = max_restarts;
  status_.started = unix_seconds();
}

void StatusBoard::changed() {
  ++version_;
  cv_.notify_all();
}

void StatusBoard::on_round(const Round& round) {
  std::lock_guard lock(mutex_);
  status_.round = round.id;
  status_.node = round.ranks.group_rank;
  status_.nodes = round.ranks.group_world_size;
  status_.world_size = round.ranks.world_size;
  status_.restarts = round.restart_count;
  base_rank_ = round.ranks.base_rank;
  // A new attempt: its workers' lines start afresh (line_hook is asked for next).
  status_.ranks.clear();
  lines_.clear();
  changed();
}

void StatusBoard::on_event(const std::string& name, const json& fields) {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  if (name == "rendezvous_started") {
    status_.state = "rendezvous";
    rendezvous_started_ = now;
  } else if (name == "rendezvous_completed") {
    ++status_.rounds;
    if (rendezvous_started_ != Clock::time_point{}) {
      status_.rendezvous_seconds +=
          std::chrono::duration<double>(now - rendezvous_started_).count();
      rendezvous_started_ = {};
    }
    status_.world_size = fields.value("world_size", status_.world_size);
  } else if (name == "node_check") {
    // This node's own findings: node 0's event has every node's, and the record is republished
    // as long as the job runs.
    status_.node_check = fields;
    const int me = fields.value("figures", json::object()).value("node", -1);
    auto own = json::array();
    for (const auto& f : fields.value("findings", json::array())) {
      if (f.is_object() && f.value("node", -2) == me) own.push_back(f);
    }
    status_.node_check["findings"] = std::move(own);
  } else if (name == "workers_started") {
    status_.state = "running";
    const auto pids = fields.value("pids", std::vector<int>{});
    status_.ranks.clear();
    for (std::size_t i = 0; i < pids.size(); ++i) {
      RankStatus r;
      r.local_rank = static_cast<int>(i);
      r.rank = base_rank_ + r.local_rank;
      r.pid = pids[i];
      r.state = "running";
      status_.ranks.push_back(r);
    }
  } else if (name == "worker_exited") {
    const int local = fields.value("local_rank", -1);
    for (auto& r : status_.ranks) {
      if (r.local_rank != local) continue;
      const int sig = fields.value("signal", 0);
      const int code = fields.value("exit_code", 0);
      r.state = sig != 0 ? "killed by " + signal_name(sig)
                         : code == 0 ? "succeeded" : fmt::format("exited {}", code);
      r.pid = 0;
    }
  } else if (name == "workers_stopped") {
    // The agent stopped what still ran; exits it collects late are not events of their own.
    for (auto& r : status_.ranks) {
      if (r.state == "running") r.state = "stopped";
      r.pid = 0;
    }
  } else if (name == "attempt_decided") {
    if (!fields.value("success", false) && fields.contains("root_cause") &&
        fields["root_cause"].is_object()) {
      const auto kind = failure_kind(fields["root_cause"]);
      if (kind == "membership") {
        ++status_.membership_changes;
      } else {
        ++status_.failures[kind];
      }
      status_.state = "stopping";
    }
  } else if (name == "restart") {
    status_.state = "restarting";
    status_.restarts = fields.value("attempt", status_.restarts);
  } else {
    return;
  }
  changed();
}

void StatusBoard::finish(const std::string& state, const std::string& how, int exit_code) {
  std::lock_guard lock(mutex_);
  status_.state = state;
  status_.ended = how;
  status_.exit_code = exit_code;
  for (auto& r : status_.ranks) {
    if (r.state == "running") r.state = "stopped";
    r.pid = 0;
  }
  changed();
}

std::function<void(std::string_view)> StatusBoard::line_hook(int local_rank) {
  std::lock_guard lock(mutex_);
  if (local_rank < 0 || local_rank >= static_cast<int>(lines_.size())) {
    lines_.resize(static_cast<std::size_t>(local_rank) + 1);
  }
  auto& slot = lines_[static_cast<std::size_t>(local_rank)];
  if (!slot) slot = std::make_shared<LastLine>();
  return [line = slot](std::string_view text) {
    auto cut = cut_line(text, kMaxLineBytes);
    {
      std::lock_guard guard(line->mutex);
      line->text.swap(cut);
    }
    line->when.store(unix_seconds());
  };
}

NodeStatus StatusBoard::snapshot() const {
  std::lock_guard lock(mutex_);
  NodeStatus s = status_;
  s.updated = unix_seconds();
  for (auto& r : s.ranks) {
    const auto i = static_cast<std::size_t>(r.local_rank);
    if (i >= lines_.size() || !lines_[i]) continue;
    const double when = lines_[i]->when.load();
    if (when > 0) r.last_output_age = std::max(0.0, s.updated - when);
    std::lock_guard guard(lines_[i]->mutex);
    r.last_line = lines_[i]->text;
  }
  return s;
}

std::uint64_t StatusBoard::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

void StatusBoard::wait_for_change(std::uint64_t seen, Clock::time_point until) const {
  std::unique_lock lock(mutex_);
  cv_.wait_until(lock, until, [&] { return closed_ || version_ != seen; });
}

void StatusBoard::wait_between_attempts(Clock::time_point until) const {
  std::unique_lock lock(mutex_);
  cv_.wait_until(lock, until, [&] {
    const auto& s = status_.state;
    return closed_ || (s != "stopping" && s != "restarting" && s != "rendezvous");
  });
}

void StatusBoard::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  cv_.notify_all();
}

}  // namespace ddprun
