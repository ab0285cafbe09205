#include "monitor/job_monitor.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "monitor/job_view.hpp"

namespace ddprun {

using namespace std::chrono_literals;
using nlohmann::json;

namespace {
constexpr auto kCacheAge = 1s;          // the other nodes' records, reread at most this often
constexpr auto kStoreReadBudget = 2s;   // a store that does not answer costs a reader this much
constexpr auto kStacksBudget = 20s;
// A record its agent has not rewritten for this long (several of its periods) is of an agent
// that is gone: the job-level metrics leave it out.
constexpr auto kStaleRecord = 30s;
constexpr std::size_t kMaxStackText = 256 * 1024;
}  // namespace

std::string dump_json(const json& j) {
  // A worker's line need not be UTF-8: what is not becomes U+FFFD, not a failed answer.
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

JobMonitor::JobMonitor(StatusBoard* board, JobMonitorOptions options)
    : board_(board), options_(std::move(options)) {
  start_server();
}

void JobMonitor::attach_store(store::StoreOpener open_store,
                              std::function<std::optional<std::uint64_t>()> store_requests) {
  {
    std::lock_guard lock(store_mutex_);
    open_store_ = open_store;
    store_requests_ = std::move(store_requests);
  }
  if (board_ != nullptr && options_.publish) {
    publisher_ = std::make_unique<StatusPublisher>(
        *board_, std::move(open_store), [this](NodeStatus& s) { sampler_.fill(s); },
        options_.publish_period);
  }
}

JobMonitor::~JobMonitor() { stop(); }

void JobMonitor::stop() {
  server_.reset();  // joins its threads: no request runs after this
  publisher_.reset();
}

void JobMonitor::start_server() {
  StatusServerOptions o;
  o.metrics_addr = options_.metrics_addr;
  o.metrics_port = options_.metrics_port;
  if (options_.control_socket) {
    try {
      o.control_path = control_socket_path();
    } catch (const Error& e) {
      spdlog::warn("status: {}; `ddprun status` on this machine will not find this job", e.what());
    }
  }
  StatusHandlers h;
  h.status = [this] { return status_json(); };
  h.metrics = [this] { return metrics(); };
  if (board_ != nullptr && !options_.stacks_dir.empty()) h.stacks = [this] { return stacks(); };
  server_ = std::make_unique<StatusServer>(o, std::move(h));
}

void JobMonitor::finish() {
  if (publisher_) publisher_->finish(1s);
}

int JobMonitor::metrics_port() const { return server_ ? server_->metrics_port() : -1; }
std::string JobMonitor::control_path() const { return server_ ? server_->control_path() : ""; }

std::vector<NodeStatus> JobMonitor::job_records() {
  if (board_ != nullptr && !options_.publish) return {};  // nobody else's records to read
  store::StoreOpener open_store;
  {
    std::lock_guard lock(store_mutex_);
    open_store = open_store_;
  }
  if (!open_store) return {};  // no store yet
  std::unique_lock lock(cache_mutex_);
  const auto fresh = [&] { return Clock::now() - cache_time_ < kCacheAge; };
  // Another request reads the store now: this one answers with what is known, at once.
  if (refreshing_) return cache_;
  if (fresh()) return cache_;
  refreshing_ = true;
  lock.unlock();
  std::vector<NodeStatus> records;
  bool ok = false;
  try {
    const auto deadline = Deadline::after(kStoreReadBudget);
    if (!reader_) reader_ = open_store(deadline);
    records = read_status_records(*reader_, deadline);
    ok = true;
  } catch (const std::exception& e) {
    spdlog::debug("status: reading the job's records: {}", e.what());
    reader_.reset();  // reconnect next time
  }
  lock.lock();
  refreshing_ = false;
  cache_time_ = Clock::now();
  if (ok) cache_ = std::move(records);
  return cache_;
}

// This agent's record, fresh, in place of its copy in the store; then the others.
std::vector<NodeStatus> JobMonitor::merged_records() {
  auto records = job_records();
  if (board_ == nullptr) return records;
  auto self = board_->snapshot();
  sampler_.fill(self);
  std::vector<NodeStatus> out{self};
  for (auto& r : records) {
    if (r.host == self.host && r.agent_pid == self.agent_pid) continue;
    if (r.run_id != self.run_id) continue;
    out.push_back(std::move(r));
  }
  return out;
}

std::string JobMonitor::status_json() {
  json nodes = json::array();
  for (const auto& n : merged_records()) nodes.push_back(n.to_json());
  return dump_json(json{{"nodes", std::move(nodes)}});
}

std::string JobMonitor::metrics() {
  std::vector<NodeStatus> nodes;
  if (board_ != nullptr) {
    // An agent speaks for its own node only: every agent is scraped.
    nodes.push_back(board_->snapshot());
    sampler_.fill(nodes.back());
  } else {
    // The job's view: each agent once, and none that stopped writing (a node lost, whose
    // last record would count its workers as running for ever). Agents not yet in a round have
    // no rank and no workers, and two of them on one host would carry the same labels.
    const double now = unix_seconds();
    for (auto& job : group_jobs(job_records(), now)) {
      for (auto& n : job.nodes) {
        const bool fresh =
            n.has_ended() || now - n.updated < std::chrono::duration<double>(kStaleRecord).count();
        if (fresh && n.node >= 0) nodes.push_back(std::move(n));
      }
    }
  }
  std::function<std::optional<std::uint64_t>()> store_requests;
  {
    std::lock_guard lock(store_mutex_);
    store_requests = store_requests_;
  }
  return metrics_text(nodes, store_requests ? store_requests() : std::nullopt, unix_seconds());
}

std::string JobMonitor::stacks() {
  bool expected = false;
  if (!capturing_.compare_exchange_strong(expected, true)) {
    throw Error("a capture of this node's stacks is already running; ask again when it ends");
  }
  struct Release {
    std::atomic<bool>& flag;
    ~Release() { flag = false; }
  } release{capturing_};
  const auto status = board_->snapshot();
  const auto dir = std::filesystem::path(options_.stacks_dir) /
                   fmt::format("stacks_{}", static_cast<long long>(unix_seconds() * 1000));
  std::filesystem::create_directories(dir);
  std::vector<StackTarget> targets;
  std::vector<const RankStatus*> ranks;
  for (const auto& r : status.ranks) {
    if (r.pid <= 0 || r.state != "running") continue;
    targets.push_back({r.pid, (dir / fmt::format("rank_{}.txt", r.rank)).string()});
    ranks.push_back(&r);
  }
  const auto captures = capture_stacks(targets, Deadline::after(kStacksBudget));
  json out = json::array();
  for (std::size_t i = 0; i < captures.size(); ++i) {
    const auto& c = captures[i];
    std::ifstream in(c.file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > kMaxStackText) text.resize(kMaxStackText);
    out.push_back({{"rank", ranks[i]->rank}, {"local_rank", ranks[i]->local_rank},
                   {"host", status.host}, {"pid", c.pid}, {"ok", c.ok}, {"error", c.error},
                   {"file", c.file}, {"python", c.python}, {"text", text}});
  }
  return dump_json(json{{"stacks", std::move(out)}});
}

}  // namespace ddprun
