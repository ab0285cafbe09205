#include "monitor/job_view.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ddprun {

std::string status_record_key(std::int64_t slot) { return fmt::format("status/node/{}", slot); }

std::vector<NodeStatus> read_status_records(store::Store& store, Deadline deadline) {
  const auto slots = store.add(kStatusSlotsKey, 0, deadline);
  std::vector<std::string> keys;
  for (std::int64_t i = 0; i < slots; ++i) keys.push_back(status_record_key(i));
  std::vector<std::optional<std::string>> values;
  if (!keys.empty() && store.check(keys, deadline)) {
    for (auto& v : store.multi_get(keys, deadline)) values.emplace_back(std::move(v));
  } else {
    // A slot taken a moment ago may not hold its record yet: never wait for it.
    for (const auto& key : keys) values.push_back(store.try_get(key, deadline));
  }
  std::vector<NodeStatus> records;
  for (const auto& value : values) {
    if (!value) continue;
    try {
      records.push_back(NodeStatus::from_json(nlohmann::json::parse(*value)));
    } catch (const std::exception&) {
      // One agent's malformed record must not hide every other node.
    }
  }
  return records;
}

int JobView::round() const {
  int r = -1;
  for (const auto& n : nodes) r = std::max(r, n.round);
  return r;
}
int JobView::restarts() const {
  int r = 0;
  for (const auto& n : nodes) r = std::max(r, n.restarts);
  return r;
}
int JobView::max_restarts() const { return nodes.empty() ? 0 : nodes.front().max_restarts; }
int JobView::membership_changes() const {
  int r = 0;
  for (const auto& n : nodes) r = std::max(r, n.membership_changes);
  return r;
}
double JobView::started() const {
  double s = 0;
  for (const auto& n : nodes) s = s == 0 ? n.started : std::min(s, n.started);
  return s;
}
bool JobView::ended() const {
  // A node gone from the job (its agent died) never writes its end; a spare's end is not the
  // job's, which its members decide.
  return std::any_of(nodes.begin(), nodes.end(), [](const auto& n) { return n.has_ended(); }) &&
         std::all_of(nodes.begin(), nodes.end(), [](const auto& n) {
           return n.has_ended() || n.state == "gone" || n.state == "spare";
         });
}
int JobView::exit_code() const {
  for (const auto& n : nodes) {
    if (n.exit_code > 0 && n.state != kLeftOut) return n.exit_code;
  }
  return 0;
}
std::string JobView::state() const {
  if (ended()) {
    // A gone node wrote no end: the ended ones say how the job ended.
    const NodeStatus* first = nullptr;
    for (const auto& n : nodes) {
      if (!n.has_ended()) continue;
      if (n.exit_code != 0 && n.state != kLeftOut) return n.state;
      if (first == nullptr || first->state == kLeftOut) first = &n;
    }
    return first->state;
  }
  // The state that explains the most: a stop or restart anywhere is the job's.
  for (const char* s : {"stopping", "restarting", "rendezvous", "starting"}) {
    for (const auto& n : nodes) {
      if (n.state == s) return s;
    }
  }
  return "running";
}

namespace {

// A worker state as the metrics count it.
std::string worker_bucket(const std::string& state) {
  if (state == "running" || state == "succeeded" || state == "stopped") return state;
  // Stopped by a signal (SIGSTOP): alive, and the job counts it among its running workers.
  if (state.rfind("stopped by ", 0) == 0) return "running";
  return "failed";
}

void mark_gone(JobView& job, double now) {
  const int round = job.round();
  int members = 0;      // records of the newest round
  int round_nodes = 0;  // the newest round's size, as its members say
  for (const auto& n : job.nodes) {
    if (n.round != round) continue;
    ++members;
    round_nodes = std::max(round_nodes, n.nodes);
  }
  for (auto& n : job.nodes) {
    if (n.has_ended() || n.round >= round) continue;
    const bool fresh = now - n.updated < kGoneAfter;
    if (members < round_nodes && fresh) continue;
    // A node never a member that is not waiting yet (it starts, it checks itself) is as it says.
    if (n.round < 0 && fresh && n.state != "rendezvous") continue;
    // A live agent that waits in the rendezvous for a place in a later round (a hot spare)
    // keeps its record fresh: it is not gone, and the job does not wait for it. A node the
    // round has room for makes its members re-form at once, and they say so.
    n.state = n.state == "rendezvous" && fresh ? "spare" : "gone";
    n.node = -1;
    n.ranks.clear();
  }
}

}  // namespace

std::vector<JobView> group_jobs(const std::vector<NodeStatus>& records, double now) {
  std::vector<JobView> jobs;
  for (const auto& record : records) {
    auto job = std::find_if(jobs.begin(), jobs.end(),
                            [&](const auto& j) { return j.run_id == record.run_id; });
    if (job == jobs.end()) {
      jobs.push_back(JobView{record.run_id, {}});
      job = std::prev(jobs.end());
    }
    auto same = std::find_if(job->nodes.begin(), job->nodes.end(), [&](const auto& n) {
      return n.host == record.host && n.agent_pid == record.agent_pid;
    });
    if (same == job->nodes.end()) {
      job->nodes.push_back(record);
    } else if (record.updated >= same->updated) {
      *same = record;
    }
  }
  for (auto& job : jobs) {
    mark_gone(job, now);
    std::stable_sort(job.nodes.begin(), job.nodes.end(), [](const auto& a, const auto& b) {
      // Nodes without a rank yet (-1) after the ranked ones.
      const auto key = [](const NodeStatus& n) { return n.node < 0 ? 1 << 30 : n.node; };
      return key(a) < key(b);
    });
  }
  return jobs;
}

std::string format_age(double seconds) {
  if (seconds < 0) return "-";
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const auto s = static_cast<long>(seconds);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

namespace {

// Cut to `width` characters (UTF-8 code points; tabs and control characters shown as spaces).
std::string fit(const std::string& text, int width) {
  std::string out;
  int shown = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool continuation = (c & 0xC0) == 0x80;
    if (!continuation) {
      if (shown == width) break;
      ++shown;
    }
    out += c < 0x20 || c == 0x7F ? ' ' : text[i];
  }
  return out;
}

std::string memory_text(std::int64_t bytes) {
  if (bytes < 0) return "-";
  if (bytes < (1 << 20)) return fmt::format("{} KiB", bytes >> 10);
  if (bytes < (std::int64_t{1} << 30)) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30));
}

// How long ago a record's age was, now: ages are as of the record's time.
double aged(double age, const NodeStatus& n, double now) {
  return age < 0 ? age : age + std::max(0.0, now - n.updated);
}

}  // namespace

std::string render_jobs(const std::vector<JobView>& jobs, int width, double now) {
  std::string out;
  const auto line = [&](const std::string& text) { out += fit(text, width) + "\n"; };
  for (const auto& job : jobs) {
    if (!out.empty()) out += "\n";
    const auto& first = job.nodes.front();
    line(fmt::format("job {}  {}  {}  round {}  restarts {}/{}  membership changes {}  age {}",
                     job.run_id, first.backend, job.state(), std::max(0, job.round()),
                     job.restarts(), job.max_restarts(), job.membership_changes(),
                     format_age(now - job.started())));
    if (job.ended()) {
      for (const auto& n : job.nodes) {
        if (!n.has_ended()) continue;  // gone: it wrote no end
        line(fmt::format("  node {} ({}): {} (exit code {})", n.node, n.host, n.ended,
                         n.exit_code));
      }
    }
    line(fmt::format("{:<5} {:<20} {:<11} {:>7} {:>9}  {}", "NODE", "HOST", "STATE", "WORKERS",
                     "UPTIME", "STATUS AGE"));
    for (const auto& n : job.nodes) {
      const auto running = std::count_if(n.ranks.begin(), n.ranks.end(), [](const auto& r) {
        return worker_bucket(r.state) == "running";
      });
      line(fmt::format("{:<5} {:<20} {:<11} {:>7} {:>9}  {}",
                       n.node < 0 ? std::string("-") : std::to_string(n.node), fit(n.host, 20),
                       n.state, fmt::format("{}/{}", running, n.ranks.size()),
                       format_age((n.has_ended() ? n.updated : now) - n.started),
                       format_age(std::max(0.0, now - n.updated))));
    }
    std::vector<std::pair<const NodeStatus*, const RankStatus*>> ranks;
    for (const auto& n : job.nodes) {
      for (const auto& r : n.ranks) ranks.emplace_back(&n, &r);
    }
    std::stable_sort(ranks.begin(), ranks.end(),
                     [](const auto& a, const auto& b) { return a.second->rank < b.second->rank; });
    line(fmt::format("{:<5} {:<5} {:<4} {:<8} {:<18} {:>6} {:>9} {:>7}  {}", "RANK", "LOCAL",
                     "NODE", "PID", "STATE", "CPU%", "RSS", "QUIET", "LAST LINE"));
    for (const auto& [n, r] : ranks) {
      line(fmt::format("{:<5} {:<5} {:<4} {:<8} {:<18} {:>6} {:>9} {:>7}  {}", r->rank,
                       r->local_rank, n->node, r->pid > 0 ? std::to_string(r->pid) : "-",
                       fit(r->state, 18),
                       r->cpu_percent < 0 ? "-" : fmt::format("{:.1f}", r->cpu_percent),
                       memory_text(r->rss_bytes),
                       format_age(aged(r->last_output_age, *n, now)), r->last_line));
    }
  }
  return out;
}

namespace {

std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

struct Exposition {
  std::string text;
  void family(const char* name, const char* type, const char* help) {
    text += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const std::string& name, const std::string& labels, double value) {
    text += name;
    if (!labels.empty()) text += "{" + labels + "}";
    // The format's spellings, where fmt would write "nan" and "inf".
    if (std::isnan(value)) {
      text += " NaN\n";
    } else if (std::isinf(value)) {
      text += value > 0 ? " +Inf\n" : " -Inf\n";
    } else {
      text += fmt::format(" {}\n", value);
    }
  }
};

std::string node_labels(const NodeStatus& n) {
  return fmt::format("node=\"{}\",host=\"{}\"", n.node, label_value(n.host));
}

// The agent's counters are keyed by its host alone: its group rank changes when an elastic job
// re-forms, and a counter under new labels is a new series, whose first increase rate() and
// increase() never see.
std::string counter_labels(const NodeStatus& n) {
  return fmt::format("host=\"{}\"", label_value(n.host));
}

// --node-check's figures, for the nodes that ran it: a finding is a node out of line, the
// links' gauges show which. Links are by the group rank the check ran as (`figures.node`): an
// elastic job's later rounds may number the nodes otherwise. A record of another shape (another
// agent's, another version's) shows no figures rather than failing the scrape.
void node_check_metrics(const std::vector<NodeStatus>& nodes, Exposition& e) {
  using nlohmann::json;
  struct Link {
    int to;
    double bytes_per_second, rtt_seconds, clock_offset_seconds;
  };
  struct Gpu {
    int index;
    double memory_used_bytes, processes, ecc_uncorrected;  // ecc: -1 where not supported
  };
  struct Checked {
    const NodeStatus* node = nullptr;
    int findings = 0;  // about this node
    double seconds = 0;
    std::optional<double> shm_free;
    std::vector<Link> links;  // sent on, that carried something
    std::vector<Gpu> gpus;    // that NVML answered for
  };
  std::vector<Checked> checked;
  for (const auto& n : nodes) {
    if (!n.node_check.is_object()) continue;
    try {
      Checked c;
      c.node = &n;
      const auto figures = n.node_check.value("figures", json::object());
      const int checked_as = figures.value("node", n.node);
      for (const auto& f : n.node_check.value("findings", json::array())) {
        if (f.value("node", -1) == checked_as) ++c.findings;
      }
      c.seconds = n.node_check.value("seconds", 0.0);
      if (figures.value("has_shm", false)) c.shm_free = figures.value("shm_free_bytes", 0.0);
      for (const auto& l : n.node_check.value("links", json::array())) {
        if (l.value("from", -1) != checked_as || !l.value("error", std::string()).empty()) continue;
        c.links.push_back({l.value("to", -1), l.value("bytes_per_second", 0.0),
                           l.value("rtt_seconds", 0.0), l.value("clock_offset_seconds", 0.0)});
      }
      for (const auto& g : figures.value("gpus", json::object()).value("gpus", json::array())) {
        if (!g.value("error", std::string()).empty()) continue;
        c.gpus.push_back({g.value("index", -1), g.value("memory_used_bytes", 0.0),
                          static_cast<double>(g.value("processes", json::array()).size()),
                          g.value("ecc_uncorrected_volatile", -1.0)});
      }
      checked.push_back(std::move(c));
    } catch (const json::exception&) {
    }
  }
  if (checked.empty()) return;
  e.family("ddprun_node_check_findings", "gauge",
           "What --node-check named about this node before the job's first workers started.");
  for (const auto& c : checked) {
    e.sample("ddprun_node_check_findings", node_labels(*c.node), c.findings);
  }
  e.family("ddprun_node_check_seconds", "gauge", "How long --node-check took on this node.");
  for (const auto& c : checked) {
    e.sample("ddprun_node_check_seconds", node_labels(*c.node), c.seconds);
  }
  e.family("ddprun_node_check_shm_free_bytes", "gauge", "/dev/shm's free space, as checked.");
  for (const auto& c : checked) {
    if (c.shm_free) e.sample("ddprun_node_check_shm_free_bytes", node_labels(*c.node), *c.shm_free);
  }
  // The links this node sent on, by the node at the other end, each that measured `field`:
  // `measured_by` above zero (the round trip, for the clock's offset, which may be zero or less).
  const auto link_samples = [&](const char* name, double Link::*field,
                                double Link::*measured_by) {
    for (const auto& c : checked) {
      for (const auto& l : c.links) {
        if (l.*measured_by <= 0) continue;
        e.sample(name, fmt::format("{},to=\"{}\"", node_labels(*c.node), l.to), l.*field);
      }
    }
  };
  e.family("ddprun_node_check_link_bytes_per_second", "gauge",
           "Throughput of the link from this node to another, as --node-check measured it.");
  link_samples("ddprun_node_check_link_bytes_per_second", &Link::bytes_per_second,
               &Link::bytes_per_second);
  e.family("ddprun_node_check_link_round_trip_seconds", "gauge",
           "Shortest round trip on the link from this node to another, as --node-check "
           "measured it.");
  link_samples("ddprun_node_check_link_round_trip_seconds", &Link::rtt_seconds,
               &Link::rtt_seconds);
  e.family("ddprun_node_check_link_clock_offset_seconds", "gauge",
           "The other node's wall clock minus this node's, as --node-check measured it.");
  link_samples("ddprun_node_check_link_clock_offset_seconds", &Link::clock_offset_seconds,
               &Link::rtt_seconds);
  // Each visible GPU's figures, by its nvidia-smi index, where any node has GPUs.
  const auto gpu_samples = [&](const char* name, const char* help, double Gpu::*field) {
    bool any = false;
    for (const auto& c : checked) {
      for (const auto& g : c.gpus) {
        if (g.*field < 0) continue;
        if (!std::exchange(any, true)) e.family(name, "gauge", help);
        e.sample(name, fmt::format("{},gpu=\"{}\"", node_labels(*c.node), g.index), g.*field);
      }
    }
  };
  gpu_samples("ddprun_node_check_gpu_memory_used_bytes",
              "Memory in use on a GPU of this node's workers, as --node-check read it.",
              &Gpu::memory_used_bytes);
  gpu_samples("ddprun_node_check_gpu_processes",
              "Processes holding memory on a GPU of this node's workers before they started.",
              &Gpu::processes);
  gpu_samples("ddprun_node_check_gpu_ecc_uncorrected_errors",
              "Uncorrectable ECC errors of a GPU since its driver loaded, where ECC is on.",
              &Gpu::ecc_uncorrected);
}

}  // namespace

std::string metrics_text(const std::vector<NodeStatus>& nodes,
                         std::optional<std::uint64_t> store_requests, double now) {
  Exposition e;
  e.family("ddprun_info", "gauge", "ddprun's version and the job this agent runs.");
  for (const auto& n : nodes) {
    e.sample("ddprun_info",
             fmt::format("version=\"{}\",run_id=\"{}\",backend=\"{}\",{}", label_value(n.version),
                         label_value(n.run_id), n.backend, node_labels(n)),
             1);
  }
  e.family("ddprun_workers", "gauge", "This node's workers of the current attempt, by state.");
  for (const auto& n : nodes) {
    std::map<std::string, int> by_state{{"running", 0}, {"succeeded", 0}, {"failed", 0},
                                        {"stopped", 0}};
    for (const auto& r : n.ranks) ++by_state[worker_bucket(r.state)];
    for (const auto& [state, count] : by_state) {
      e.sample("ddprun_workers", fmt::format("{},state=\"{}\"", node_labels(n), state), count);
    }
  }
  e.family("ddprun_world_size", "gauge", "Workers in the whole job in the current round.");
  for (const auto& n : nodes) e.sample("ddprun_world_size", node_labels(n), n.world_size);
  e.family("ddprun_restarts_total", "counter", "Restarts of the job's workers after a failure.");
  for (const auto& n : nodes) e.sample("ddprun_restarts_total", counter_labels(n), n.restarts);
  e.family("ddprun_restarts_allowed", "gauge", "Restarts the job may spend (--max-restarts).");
  for (const auto& n : nodes) e.sample("ddprun_restarts_allowed", node_labels(n), n.max_restarts);
  e.family("ddprun_failures_total", "counter",
           "Attempts that ended in a failure, by kind (exit_code, signal, hang, node_lost, "
           "stopped, agent).");
  for (const auto& n : nodes) {
    std::map<std::string, int> kinds{{"exit_code", 0}, {"signal", 0}, {"hang", 0},
                                     {"node_lost", 0}, {"stopped", 0}, {"agent", 0}};
    for (const auto& [kind, count] : n.failures) kinds[kind] = count;
    for (const auto& [kind, count] : kinds) {
      e.sample("ddprun_failures_total", fmt::format("{},kind=\"{}\"", counter_labels(n), kind),
               count);
    }
  }
  e.family("ddprun_membership_changes_total", "counter",
           "Rounds that ended because a node joined, left or died.");
  for (const auto& n : nodes) {
    e.sample("ddprun_membership_changes_total", counter_labels(n), n.membership_changes);
  }
  e.family("ddprun_rendezvous_duration_seconds", "summary",
           "Rendezvous rounds this agent completed, and the time they took.");
  for (const auto& n : nodes) {
    e.sample("ddprun_rendezvous_duration_seconds_sum", counter_labels(n), n.rendezvous_seconds);
    e.sample("ddprun_rendezvous_duration_seconds_count", counter_labels(n), n.rounds);
  }
  e.family("ddprun_agent_start_time_seconds", "gauge",
           "When this node's agent started, in seconds since the epoch.");
  for (const auto& n : nodes) e.sample("ddprun_agent_start_time_seconds", node_labels(n), n.started);

  const auto rank_labels = [](const NodeStatus& n, const RankStatus& r) {
    return fmt::format("{},rank=\"{}\",local_rank=\"{}\"", node_labels(n), r.rank, r.local_rank);
  };
  e.family("ddprun_rank_last_output_age_seconds", "gauge",
           "Seconds since the rank last wrote a line (absent before its first).");
  for (const auto& n : nodes) {
    for (const auto& r : n.ranks) {
      if (worker_bucket(r.state) == "running" && r.last_output_age >= 0) {
        e.sample("ddprun_rank_last_output_age_seconds", rank_labels(n, r),
                 aged(r.last_output_age, n, now));
      }
    }
  }
  e.family("ddprun_rank_resident_memory_bytes", "gauge", "The rank's resident memory.");
  for (const auto& n : nodes) {
    for (const auto& r : n.ranks) {
      if (r.rss_bytes >= 0) e.sample("ddprun_rank_resident_memory_bytes", rank_labels(n, r), r.rss_bytes);
    }
  }
  e.family("ddprun_rank_cpu_seconds_total", "counter",
           "CPU time the rank's process has used (user and system).");
  for (const auto& n : nodes) {
    for (const auto& r : n.ranks) {
      if (r.cpu_seconds >= 0) e.sample("ddprun_rank_cpu_seconds_total", rank_labels(n, r), r.cpu_seconds);
    }
  }
  node_check_metrics(nodes, e);
  if (store_requests) {
    e.family("ddprun_store_requests_total", "counter",
             "Requests the job's store, served by this agent, answered over TCP.");
    e.sample("ddprun_store_requests_total", "", static_cast<double>(*store_requests));
  }
  return e.text;
}

}  // namespace ddprun
