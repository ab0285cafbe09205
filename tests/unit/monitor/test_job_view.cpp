// The pure side of watching a job: records in and out of JSON and the store, a job's view from
// its nodes' records, the table and Prometheus's text format.

#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "monitor/job_view.hpp"
#include "store/memory_store.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

namespace {

NodeStatus node(const std::string& run_id, int rank, const std::string& host, int pid,
                int workers) {
  NodeStatus n;
  n.run_id = run_id;
  n.backend = "static";
  n.host = host;
  n.version = "1.2.3";
  n.agent_pid = pid;
  n.node = rank;
  n.nodes = 2;
  n.world_size = 3;
  n.round = 1;
  n.state = "running";
  n.restarts = 1;
  n.max_restarts = 3;
  n.rounds = 2;
  n.rendezvous_seconds = 0.25;
  n.failures = {{"exit_code", 1}};
  n.started = 1000;
  n.updated = 1100;
  for (int i = 0; i < workers; ++i) {
    RankStatus r;
    r.rank = rank * 2 + i;
    r.local_rank = i;
    r.pid = pid + 1 + i;
    r.state = "running";
    r.last_output_age = 2;
    r.last_line = "step " + std::to_string(i);
    r.cpu_seconds = 12.5;
    r.cpu_percent = 99;
    r.rss_bytes = 300 << 20;
    n.ranks.push_back(r);
  }
  return n;
}

Deadline soon() { return Deadline::after(5s); }

}  // namespace

TEST_CASE("a node record survives JSON, a malformed one is an error naming the field",
          "[monitor]") {
  auto n = node("job", 1, "host-b", 4000, 2);
  n.ended = "failed: rank 3 exited with 2";
  n.exit_code = 2;
  const auto back = NodeStatus::from_json(nlohmann::json::parse(n.to_json().dump()));
  CHECK(back.to_json() == n.to_json());
  CHECK(back.has_ended());
  CHECK(back.ranks.at(1).last_line == "step 1");
  CHECK(back.ranks.at(1).rss_bytes == (300 << 20));

  auto broken = n.to_json();
  broken.erase("restarts");
  CHECK_THROWS_WITH(NodeStatus::from_json(broken), Catch::Contains("restarts"));
}

TEST_CASE("the records are read from the store by slot, one malformed or missing is skipped",
          "[monitor]") {
  store::MemoryStore store;
  for (int i = 0; i < 4; ++i) CHECK(store.add(kStatusSlotsKey, 1, soon()) == i + 1);
  store.set(status_record_key(0), node("job", 0, "a", 10, 1).to_json().dump(), soon());
  store.set(status_record_key(1), "{not json", soon());
  // slot 2 taken and not yet written
  store.set(status_record_key(3), node("job", 1, "b", 20, 2).to_json().dump(), soon());
  const auto records = read_status_records(store, soon());
  REQUIRE(records.size() == 2);
  CHECK(records[0].host == "a");
  CHECK(records[1].host == "b");

  store::MemoryStore empty;
  CHECK(read_status_records(empty, soon()).empty());
}

TEST_CASE("jobs are grouped by run id, each agent once (its newest record), nodes in rank order",
          "[monitor]") {
  auto older = node("job", 0, "a", 10, 2);
  auto newer = older;
  newer.updated = older.updated + 5;
  newer.state = "restarting";
  const auto jobs = group_jobs({node("job", 1, "b", 20, 1), newer, node("other", 0, "c", 30, 1),
                                older}, 1200);
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].run_id == "job");
  REQUIRE(jobs[0].nodes.size() == 2);
  CHECK(jobs[0].nodes[0].host == "a");
  CHECK(jobs[0].nodes[0].state == "restarting");
  CHECK(jobs[0].nodes[1].host == "b");
  CHECK(jobs[0].state() == "restarting");  // one node restarting: the job is
  CHECK(jobs[1].state() == "running");
  CHECK(jobs[0].restarts() == 1);
  CHECK(jobs[0].started() == 1000);
  CHECK_FALSE(jobs[0].ended());

  auto a = node("done", 0, "a", 10, 1);
  auto b = node("done", 1, "b", 20, 1);
  a.exit_code = 0;
  a.state = "succeeded";
  b.exit_code = 3;
  b.state = "failed";
  const auto ended = group_jobs({a, b}, 1200);
  CHECK(ended[0].ended());
  CHECK(ended[0].exit_code() == 3);
  CHECK(ended[0].state() == "failed");

  // A node --node-check=exclude left out ended with 120, and the job went on without it.
  auto out = node("done", 1, "c", 30, 1);
  out.exit_code = 120;
  out.state = ddprun::kLeftOut;
  out.round = 0;
  for (const auto& order : {std::vector<NodeStatus>{out, a}, std::vector<NodeStatus>{a, out}}) {
    const auto went_on = group_jobs(order, 1200);
    CHECK(went_on[0].ended());
    CHECK(went_on[0].exit_code() == 0);
    CHECK(went_on[0].state() == "succeeded");
    CHECK(went_on[0].nodes.size() == 2);
  }
}

TEST_CASE("a node that is not a member of the newest round is gone, without its ranks",
          "[monitor]") {
  // Round 1 has two members (a and b); c's last record is of round 0, where it ran: its agent
  // died and the others formed round 1 without it.
  auto a = node("job", 0, "a", 10, 2);
  auto b = node("job", 1, "b", 20, 1);
  auto c = node("job", 2, "c", 30, 1);
  c.round = 0;
  c.nodes = 3;
  c.updated = 1095;
  const auto gone = [](const JobView& job, const std::string& host) {
    const auto n = std::find_if(job.nodes.begin(), job.nodes.end(),
                                [&](const NodeStatus& x) { return x.host == host; });
    REQUIRE(n != job.nodes.end());
    return n->state == "gone" && n->node == -1 && n->ranks.empty();
  };
  {
    const auto jobs = group_jobs({a, b, c}, 1100);  // every member of round 1 has written
    REQUIRE(jobs.size() == 1);
    CHECK(gone(jobs[0], "c"));
    CHECK_FALSE(gone(jobs[0], "a"));
    CHECK(jobs[0].nodes.back().host == "c");  // after the ranked nodes
    CHECK(jobs[0].state() == "running");
    const auto table = render_jobs(jobs, 200, 1100);
    CHECK(table.find("gone") != std::string::npos);
    CHECK(std::regex_search(table, std::regex("\n-     c +gone +0/0 ")));
  }
  {
    // c is alive and waits for a place in a later round, a hot spare: not gone, and the job
    // runs.
    auto spare = c;
    spare.state = "rendezvous";
    const auto jobs = group_jobs({a, b, spare}, 1100);
    const auto n = std::find_if(jobs[0].nodes.begin(), jobs[0].nodes.end(),
                                [](const NodeStatus& x) { return x.host == "c"; });
    REQUIRE(n != jobs[0].nodes.end());
    CHECK(n->state == "spare");
    CHECK(n->node == -1);
    CHECK(jobs[0].state() == "running");
    // Its records stopped: its agent died while it waited.
    CHECK(gone(group_jobs({a, b, spare}, 1095 + kGoneAfter + 1)[0], "c"));
    // Every member ended: so did the job, whatever the spare has yet to learn.
    auto a_done = a;
    auto b_done = b;
    a_done.state = b_done.state = "succeeded";
    a_done.exit_code = b_done.exit_code = 0;
    const auto over = group_jobs({a_done, b_done, spare}, 1100);
    CHECK(over[0].ended());
    CHECK(over[0].state() == "succeeded");
  }
  {
    // b has not written round 1 yet: c may be a member on its way, until its record is old.
    const auto jobs = group_jobs({a, c}, 1100);
    CHECK_FALSE(gone(jobs[0], "c"));
    CHECK(gone(group_jobs({a, c}, 1095 + kGoneAfter + 1)[0], "c"));
  }
  {
    // A node never a member that waits while the round runs: a hot spare, and the job runs;
    // one that ended: as it is.
    auto waiting = node("job", -1, "d", 40, 0);
    waiting.round = -1;
    waiting.state = "rendezvous";
    waiting.updated = 1195;
    auto ended = c;
    ended.exit_code = 0;
    ended.state = "succeeded";
    const auto jobs = group_jobs({a, b, waiting, ended}, 1200);
    const auto d = std::find_if(jobs[0].nodes.begin(), jobs[0].nodes.end(),
                                [](const NodeStatus& x) { return x.host == "d"; });
    REQUIRE(d != jobs[0].nodes.end());
    CHECK(d->state == "spare");
    CHECK_FALSE(gone(jobs[0], "c"));
    CHECK(jobs[0].state() == "running");
    // Its records stopped: gone. Still starting (its own node check): as it says.
    CHECK(gone(group_jobs({a, b, waiting}, 1195 + kGoneAfter + 1)[0], "d"));
    auto starting = waiting;
    starting.state = "starting";
    const auto early = group_jobs({a, b, starting}, 1200);
    CHECK(std::any_of(early[0].nodes.begin(), early[0].nodes.end(),
                      [](const NodeStatus& x) { return x.state == "starting"; }));
    // No round yet: every node waits in the rendezvous, none a spare.
    auto first = waiting;
    first.host = "e";
    const auto forming = group_jobs({waiting, first}, 1200);
    CHECK(forming[0].state() == "rendezvous");
  }
  {
    // Every member ended, the gone node never will: the job has ended, as its members say.
    a.exit_code = b.exit_code = 0;
    a.state = b.state = "succeeded";
    const auto jobs = group_jobs({a, b, c}, 1100);
    CHECK(jobs[0].ended());
    CHECK(jobs[0].state() == "succeeded");
    CHECK(jobs[0].exit_code() == 0);
    CHECK(render_jobs(jobs, 200, 1100).find("exit code -1") == std::string::npos);
  }
}

TEST_CASE("the table fits the terminal, ranks in order, control characters blanked",
          "[monitor]") {
  auto a = node("job", 0, "host-a", 10, 2);
  auto b = node("job", 1, "host-b", 20, 2);
  b.ranks[0].last_line = std::string("tab\there\x1b[31m red ") + std::string(300, 'x');
  const auto jobs = group_jobs({b, a}, 1200);
  const auto wide = render_jobs(jobs, 1000, 1102);
  CHECK_THAT(wide, Catch::Contains("job job  static  running  round 1  restarts 1/3  "
                                   "membership changes 0  age 1m42s"));
  CHECK(wide.find("\x1b") == std::string::npos);
  CHECK(wide.find('\t') == std::string::npos);
  // Rank rows by rank, whichever node's record came first; ages aged by the record's age.
  const auto r0 = wide.find("\n0     0     0    11");
  const auto r2 = wide.find("\n2     0     1    21");
  CHECK(r0 != std::string::npos);
  CHECK(r2 != std::string::npos);
  CHECK(r0 < r2);
  CHECK_THAT(wide, Catch::Contains("4.0s  step 1"));  // 2 s old when taken, 2 s ago
  CHECK_THAT(wide, Catch::Contains("300 MiB"));

  const auto narrow = render_jobs(jobs, 60, 1102);
  std::istringstream lines(narrow);
  std::string line;
  while (std::getline(lines, line)) CHECK(line.size() <= 60);
}

TEST_CASE("the metrics follow Prometheus's text format and naming rules", "[monitor]") {
  auto a = node("job", 0, "we\"ird\\host\nname", 10, 2);
  const auto text = metrics_text({a}, 42, 1101);
  // Every sample belongs to a family announced by HELP and TYPE lines before it.
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? -?[0-9.e+]+$)");
  std::istringstream lines(text);
  std::string line;
  std::string family;
  std::string type;
  int samples = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      CHECK(line.substr(7, family.size()) == family);
      type = line.substr(8 + family.size());
      if (type == "counter") CHECK(family.size() > 6);
      if (type == "counter") CHECK(family.substr(family.size() - 6) == "_total");
      continue;
    }
    INFO(line);
    std::smatch m;
    REQUIRE(std::regex_match(line, m, sample));
    CHECK(m[1].str().rfind(family, 0) == 0);
    ++samples;
  }
  CHECK(samples > 20);
  CHECK_THAT(text, Catch::Contains(R"(host="we\"ird\\host\nname")"));
  CHECK_THAT(text, Catch::Contains("ddprun_store_requests_total 42\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE ddprun_rendezvous_duration_seconds summary"));
  CHECK_THAT(text, Catch::Contains(",kind=\"exit_code\"} 1\n"));
  CHECK_THAT(text, Catch::Contains(",kind=\"hang\"} 0\n"));  // every kind, so rate() has a series
  CHECK_THAT(text, Catch::Contains(",state=\"running\"} 2\n"));
  CHECK(metrics_text({a}, std::nullopt, 1101).find("ddprun_store_requests_total") ==
        std::string::npos);
}

TEST_CASE("an agent's counters keep their series when a re-form gives it another node",
          "[monitor]") {
  // Node 2 of round 0 becomes node 1 of round 1 (node 1 left): its counters go on in the same
  // series, which rate() and increase() need; its gauges say its new node.
  auto before = node("job", 2, "host-c", 10, 1);
  auto after = before;
  after.node = 1;
  after.membership_changes = before.membership_changes + 1;
  const auto labels_of = [](const std::string& text, const std::string& sample) {
    const auto at = text.find("\n" + sample + "{");
    REQUIRE(at != std::string::npos);
    const auto open = at + 1 + sample.size();
    return text.substr(open, text.find('}', open) - open + 1);
  };
  const auto was = metrics_text({before}, std::nullopt, 1101);
  const auto is = metrics_text({after}, std::nullopt, 1101);
  for (const char* counter : {"ddprun_restarts_total", "ddprun_failures_total",
                              "ddprun_membership_changes_total",
                              "ddprun_rendezvous_duration_seconds_sum",
                              "ddprun_rendezvous_duration_seconds_count"}) {
    INFO(counter);
    CHECK(labels_of(was, counter) == labels_of(is, counter));
    CHECK(labels_of(is, counter).find("node=") == std::string::npos);
  }
  CHECK(labels_of(was, "ddprun_info").find("node=\"2\"") != std::string::npos);
  CHECK(labels_of(is, "ddprun_info").find("node=\"1\"") != std::string::npos);
}

TEST_CASE("the node check's figures are in the record and the metrics of the nodes that ran it",
          "[monitor][node_check]") {
  auto a = node("job", 1, "host-b", 10, 1);
  CHECK(metrics_text({a}, std::nullopt, 1101).find("ddprun_node_check") == std::string::npos);
  a.node_check = nlohmann::json::parse(R"({
    "figures": {"node": 1, "has_shm": true, "shm_free_bytes": 67108864},
    "links": [
      {"from": 1, "to": 2, "pairing": 0, "rtt_seconds": 5e-05, "bytes_per_second": 1.1e9,
       "clock_offset_seconds": -0.5, "error": ""},
      {"from": 0, "to": 1, "pairing": 0, "rtt_seconds": 6e-05, "bytes_per_second": 1.0e9,
       "error": ""},
      {"from": 1, "to": 3, "pairing": 1, "rtt_seconds": 0, "bytes_per_second": 0,
       "error": "Connection refused"}],
    "findings": [{"node": 1, "host": "host-b", "what": "/dev/shm has 64 MiB free"},
                 {"node": 1, "host": "host-b", "what": "link to node 3 (h3): Connection refused"},
                 {"node": 2, "host": "host-c", "what": "not this one"}],
    "seconds": 0.25})");
  const auto back = NodeStatus::from_json(nlohmann::json::parse(a.to_json().dump()));
  CHECK(back.node_check == a.node_check);
  const auto text = metrics_text({a}, std::nullopt, 1101);
  const std::string labels = "{node=\"1\",host=\"host-b\"";
  CHECK_THAT(text, Catch::Contains("ddprun_node_check_findings" + labels + "} 2\n"));
  CHECK_THAT(text, Catch::Contains("ddprun_node_check_seconds" + labels + "} 0.25\n"));
  CHECK_THAT(text, Catch::Contains("ddprun_node_check_shm_free_bytes" + labels + "} 67108864\n"));
  // Only the links this node sent on, and only those that carried something.
  CHECK_THAT(text, Catch::Contains("ddprun_node_check_link_bytes_per_second" + labels +
                                   ",to=\"2\"} 1100000000\n"));
  CHECK_THAT(text, Catch::Contains("ddprun_node_check_link_round_trip_seconds" + labels +
                                   ",to=\"2\"} 5e-05\n"));
  CHECK_THAT(text, Catch::Contains("ddprun_node_check_link_clock_offset_seconds" + labels +
                                   ",to=\"2\"} -0.5\n"));
  CHECK(text.find("to=\"1\"") == std::string::npos);
  CHECK(text.find("to=\"3\"") == std::string::npos);
  CHECK(text.find("ddprun_node_check_gpu") == std::string::npos);  // no GPU: no GPU families
  // A GPU node's GPUs, by nvidia-smi's index; a lost GPU has no figures, ECC off none for ECC.
  a.node_check["figures"]["gpus"] = nlohmann::json::parse(R"({"skipped": "", "gpus": [
    {"index": 0, "error": "", "memory_used_bytes": 3.2e10, "processes": [{"pid": 4242}],
     "ecc_uncorrected_volatile": 2},
    {"index": 1, "error": "", "memory_used_bytes": 5e8, "processes": [],
     "ecc_uncorrected_volatile": -1},
    {"index": 2, "error": "GPU is lost"}]})");
  const auto with_gpus = metrics_text({a}, std::nullopt, 1101);
  CHECK_THAT(with_gpus, Catch::Contains("ddprun_node_check_gpu_memory_used_bytes" + labels +
                                        ",gpu=\"0\"} 32000000000\n"));
  CHECK_THAT(with_gpus, Catch::Contains("ddprun_node_check_gpu_processes" + labels +
                                        ",gpu=\"0\"} 1\n"));
  CHECK_THAT(with_gpus, Catch::Contains("ddprun_node_check_gpu_processes" + labels +
                                        ",gpu=\"1\"} 0\n"));
  CHECK_THAT(with_gpus, Catch::Contains("ddprun_node_check_gpu_ecc_uncorrected_errors" + labels +
                                        ",gpu=\"0\"} 2\n"));
  CHECK(with_gpus.find("_errors" + labels + ",gpu=\"1\"") == std::string::npos);
  CHECK(with_gpus.find("gpu=\"2\"") == std::string::npos);
  // A record of another shape shows no figures, and the scrape goes on.
  auto b = node("job", 0, "host-a", 20, 1);
  b.node_check = nlohmann::json::parse(R"({"findings": [1, 2], "seconds": "slow"})");
  const auto both = metrics_text({a, b}, std::nullopt, 1101);
  CHECK_THAT(both, Catch::Contains("ddprun_node_check_findings" + labels + "} 2\n"));
  CHECK(both.find("ddprun_node_check_seconds{node=\"0\"") == std::string::npos);
  auto c = b.to_json();
  c["node_check"] = "not an object";
  CHECK(NodeStatus::from_json(c).node_check.is_null());
}

TEST_CASE("ages read as a person would say them", "[monitor]") {
  CHECK(format_age(0.04) == "0.0s");
  CHECK(format_age(12.34) == "12.3s");
  CHECK(format_age(245) == "4m05s");
  CHECK(format_age(3725) == "1h02m");
  CHECK(format_age(90000) == "1d01h");
  CHECK(format_age(-1) == "-");
}
