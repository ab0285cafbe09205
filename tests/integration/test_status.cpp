// `ddprun status` and the metrics, against real agents: a static two-node job seen from this
// machine, from its store and by a real Prometheus server, through a restart and after its end;
// c10d and etcd jobs from their stores; a terminal (tmux) for --watch; and hostile clients of
// the control socket and the metrics port while a job runs.

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "testing/ddprun_process.hpp"
#include "testing/elastic_cluster.hpp"
#include "testing/etcd_cluster.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// A private control directory for the job and `ddprun status`: the test sees only its own jobs.
struct Runtime {
  TempDir dir;
  std::string path = dir.file("rt");
  Runtime() {
    std::filesystem::create_directory(path);
    ::chmod(path.c_str(), 0700);
  }
  std::map<std::string, std::string> env() const { return {{"XDG_RUNTIME_DIR", path}}; }
  // Its control directory, made as an agent makes it.
  std::string control_dir() const {
    const auto made = path + "/ddprun";
    std::filesystem::create_directory(made);
    ::chmod(made.c_str(), 0700);
    return made;
  }
};

struct Answer {
  int code;
  std::string out;     // stdout: the table or the JSON
  std::string output;  // stdout, then stderr
};

// A Unix socket bound at `path` in a job's control directory, not yet listening.
int bound_unix_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

Answer status(const Runtime& rt, std::vector<std::string> args) {
  TempDir dir;
  const auto env = rt.env();
  SpawnSpec spec{std::vector<std::string>{DDPRUN_BINARY, "status"} + args,
                 {env.begin(), env.end()}, dir.file("out")};
  spec.errors = dir.file("err");
  Child p(spec);
  const int code = exit_code(p.wait(60s));
  const auto out = read_file(dir.file("out"));
  return {code, out, out + read_file(dir.file("err"))};
}

// `ddprun status --json ARGS`, parsed; null when it found no job. A warning on stderr (an agent
// still starting that did not answer) leaves the JSON on stdout whole.
json status_json(const Runtime& rt, std::vector<std::string> args = {}) {
  auto a = status(rt, std::vector<std::string>{"--json"} + args);
  if (a.code != 0) return nullptr;
  return json::parse(a.out);
}

// Every rank of the first job, by rank: its state and last line.
std::map<int, std::pair<std::string, std::string>> ranks_of(const json& j) {
  std::map<int, std::pair<std::string, std::string>> out;
  if (j.is_null() || j["jobs"].empty()) return out;
  for (const auto& node : j["jobs"][0]["nodes"]) {
    for (const auto& r : node["ranks"]) {
      out[r["rank"].get<int>()] = {r["state"].get<std::string>(),
                                   r["last_line"].get<std::string>()};
    }
  }
  return out;
}

bool all_waiting(const json& j, int world, int attempt) {
  const auto ranks = ranks_of(j);
  if (static_cast<int>(ranks.size()) != world) return false;
  for (const auto& [rank, r] : ranks) {
    if (r.first != "running" ||
        r.second != "rank " + std::to_string(rank) + " attempt " + std::to_string(attempt) + " waiting") {
      return false;
    }
  }
  return true;
}

// The value of the one sample `series` (name and labels as written) in a metrics page.
std::optional<double> sample(const std::string& page, const std::string& series) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

// The worker every job here runs: it says it waits, then waits at a gate; rank `fail_rank`
// of the first attempt waits at `fail` and exits 3.
std::vector<std::string> gated_worker(const Gate& finish, const Gate& fail, int fail_rank) {
  return {"--no-python", "sh", "-c",
          "echo \"rank $RANK attempt $TORCHELASTIC_RESTART_COUNT waiting\"; "
          "if [ \"$RANK\" = " + std::to_string(fail_rank) +
              " ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then flock -s " + fail.path() +
              " true; exit 3; fi; flock -s " + finish.path() + " true"};
}

// Runs a program to its end (at most a minute) and returns what it printed.
std::string run(const TempDir& dir, std::vector<std::string> argv) {
  const auto out = dir.file("run.out");
  std::filesystem::remove(out);
  Child c(SpawnSpec{std::move(argv), {}, out});
  c.wait(60s);
  return read_file(out);
}

std::string url_encoded(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// The value of an instant PromQL query with one result, as Prometheus's HTTP API gives it.
std::optional<std::string> promql(std::uint16_t port, const std::string& query) {
  const auto answer = http_get(port, "/api/v1/query?query=" + url_encoded(query));
  const auto body = answer.find("\r\n\r\n");
  if (body == std::string::npos) return std::nullopt;
  try {
    const auto j = json::parse(answer.substr(body + 4));
    const auto& result = j.at("data").at("result");
    if (result.size() != 1) return std::nullopt;
    return result[0].at("value").at(1).get<std::string>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool on_path(const std::string& program) {
  for (const auto& dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    if (::access((std::string(dir) + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a static two-node job from this machine, from its store and as metrics, "
          "through a restart and after its end", "[status]") {
  Runtime rt;
  Gate finish, fail;
  const auto port = std::to_string(free_port());
  const auto metrics = free_port();
  const std::vector<std::string> common{"--nnodes=2", "--master-port=" + port, "--max-restarts=1",
                                        "--rdzv-id=watched"};
  DdprunProcess node0(common + std::vector<std::string>{"--node-rank=0", "--nproc-per-node=2",
                                                        "--metrics-port=" + std::to_string(metrics)} +
                          gated_worker(finish, fail, 2),
                      rt.env());
  DdprunProcess node1(common + std::vector<std::string>{"--node-rank=1", "--nproc-per-node=1"} +
                          gated_worker(finish, fail, 2),
                      rt.env());

  // From this machine: both agents, every rank running with its last line.
  json seen;
  const std::vector<std::string> here{"--rdzv-id=watched"};
  REQUIRE(wait_until([&] { return all_waiting(seen = status_json(rt, here), 3, 0); }, 60s));
  CHECK(seen["jobs"].size() == 1);
  CHECK(seen["jobs"][0]["run_id"] == "watched");
  CHECK(seen["jobs"][0]["nodes"].size() == 2);
  for (const auto& node : seen["jobs"][0]["nodes"]) {
    for (const auto& r : node["ranks"]) {
      CHECK(r["pid"].get<int>() > 0);
      CHECK(r["rss_bytes"].get<std::int64_t>() > 0);
      CHECK(r["last_output_age"].get<double>() >= 0);
    }
  }
  const auto table = status(rt, here);
  CHECK(table.code == 0);
  CHECK_THAT(table.output, Catch::Contains("job watched  static  running  round 0  restarts 0/1"));
  CHECK_THAT(table.output, Catch::Contains("rank 2 attempt 0 waiting"));

  // From the job's store, as from another machine.
  const std::vector<std::string> remote{"--rdzv-endpoint=127.0.0.1:" + port, "--rdzv-backend=static",
                                        "--rdzv-id=watched"};
  REQUIRE(wait_until([&] { return all_waiting(status_json(rt, remote), 3, 0); }, 60s));
  const auto wrong = status(rt, {"--rdzv-endpoint=127.0.0.1:" + port, "--rdzv-backend=static",
                                 "--rdzv-id=other"});
  CHECK(wrong.code == 3);
  CHECK_THAT(wrong.output, Catch::Contains("job 'other'"));

  // The metrics of node 0.
  auto page = http_get(metrics, "/metrics");
  CHECK_THAT(page, Catch::Contains("HTTP/1.1 200"));
  CHECK_THAT(page, Catch::Contains("# TYPE ddprun_restarts_total counter"));
  CHECK(sample(page, "ddprun_workers{node=\"0\",host=\"" + seen["jobs"][0]["nodes"][0]["host"].get<std::string>() +
                         "\",state=\"running\"}") == 2.0);
  CHECK_THAT(page, Catch::Contains("ddprun_info{version=\""));
  CHECK_THAT(page, Catch::Contains("run_id=\"watched\""));
  CHECK(sample(page, "ddprun_store_requests_total").value_or(0) > 0);
  CHECK_THAT(http_get(metrics, "/status"), Catch::Contains("404"));  // output lines stay private

  // Rank 2 fails: every rank runs again, and the restart shows everywhere.
  fail.open();
  REQUIRE(wait_until([&] { return all_waiting(seen = status_json(rt, here), 3, 1); }, 90s));
  CHECK(seen["jobs"][0]["restarts"] == 1);
  REQUIRE(wait_until([&] { return all_waiting(status_json(rt, remote), 3, 1); }, 60s));
  page = http_get(metrics, "/metrics");
  const auto host = seen["jobs"][0]["nodes"][0]["host"].get<std::string>();
  CHECK(sample(page, "ddprun_restarts_total{host=\"" + host + "\"}") == 1.0);
  CHECK(sample(page, "ddprun_failures_total{host=\"" + host + "\",kind=\"exit_code\"}") == 1.0);
  CHECK(sample(page, "ddprun_rendezvous_duration_seconds_count{host=\"" + host + "\"}").value_or(0) >= 1);

  // The end: nothing left to show, from here or from the store.
  finish.open();
  CHECK(node0.wait(60s) == 0);
  CHECK(node1.wait(60s) == 0);
  const auto after = status(rt, here);
  CHECK(after.code == 3);
  CHECK_THAT(after.output,
             Catch::Contains("no running ddprun job 'watched' of this user on this machine"));
  const auto gone = status(rt, remote);
  CHECK(gone.code == 3);
  CHECK_THAT(gone.output, Catch::Contains("cannot read the status of job 'watched'"));
}

TEST_CASE("a worker stopped by SIGSTOP shows so in ddprun status, and a signal ends the job "
          "at once", "[status]") {
  Runtime rt;
  // A grace of 10 minutes: a stopped worker that was not continued would take all of it. The
  // shell gets "$$" written "$$$$": ddprun, as torchrun, reads "$$" as one "$".
  DdprunProcess p({"--nproc-per-node=2", "--rdzv-id=stopped-worker", "--shutdown-timeout=600",
                   "--master-port=0", "--no-python", "sh", "-c",
                   "trap 'exit 0' TERM; echo \"rank $RANK up\"; "
                   "if [ \"$RANK\" = 1 ]; then kill -STOP $$$$; fi; sleep 600 & wait"},
                  rt.env());
  const std::vector<std::string> here{"--rdzv-id=stopped-worker"};
  std::map<int, std::pair<std::string, std::string>> ranks;
  REQUIRE(wait_until([&] {
    ranks = ranks_of(status_json(rt, here));
    return ranks.size() == 2 && ranks[1].first == "stopped by SIGSTOP" &&
           ranks[0].first == "running";
  }, 60s));
  const auto table = status(rt, here);
  CHECK_THAT(table.output, Catch::Contains("stopped by SIGSTOP"));
  // Alive, so among the node's running workers, as in the metrics.
  CHECK_THAT(table.output, Catch::Contains("running         2/2"));
  ::kill(p.pid(), SIGTERM);
  CHECK(p.wait(60s) == 143);
  CHECK_THAT(p.output(), Catch::Contains("is stopped by SIGSTOP: continuing it"));
}

TEST_CASE("a control socket left by a killed agent is removed even when its pid is in use again",
          "[status]") {
  Runtime rt;
  const auto dir = rt.control_dir();
  // Bound and never listened on, as an agent killed with its guardian leaves it; named after a
  // process that lives (this test), as a reused pid would be.
  const auto path = fmt::format("{}/{}.sock", dir, ::getpid());
  ::close(bound_unix_socket(path));
  REQUIRE(std::filesystem::exists(path));
  // A run id of its own: other tests' jobs may run on this machine meanwhile.
  const auto answer = status(rt, {"--rdzv-id=stale-socket"});
  CHECK(answer.code == 3);
  CHECK_THAT(answer.output, Catch::Contains("no running ddprun job 'stale-socket' of this user"));
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("watch: an agent that never answers ends it, named, instead of freezing the frame",
          "[status]") {
  Runtime rt;
  const auto dir = rt.control_dir();
  // Listening, and never answering, as a stopped agent's socket does.
  const auto path = fmt::format("{}/{}.sock", dir, ::getpid());
  const int fd = bound_unix_socket(path);
  REQUIRE(::listen(fd, 8) == 0);
  const auto answer = status(rt, {"--watch=0.2", "--rdzv-id=silent-agent"});
  ::close(fd);
  CHECK(answer.code == 3);
  CHECK_THAT(answer.output, Catch::Contains(path + ": "));
  CHECK_THAT(answer.output, Catch::Contains("no running ddprun job 'silent-agent'"));
}

TEST_CASE("a c10d job from its store, and usage errors", "[status]") {
  Runtime rt;
  Gate finish, fail;
  const auto endpoint = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> common{"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint,
                                        "--rdzv-id=elastic-watched", "--nproc-per-node=1"};
  DdprunProcess a(common + gated_worker(finish, fail, -1), rt.env());
  DdprunProcess b(common + gated_worker(finish, fail, -1), rt.env());
  const std::vector<std::string> remote{"--rdzv-endpoint=" + endpoint, "--rdzv-id=elastic-watched"};
  json seen;
  REQUIRE(wait_until([&] { return all_waiting(seen = status_json(rt, remote), 2, 0); }, 60s));
  CHECK(seen["jobs"][0]["nodes"][0]["backend"] == "c10d");
  CHECK(status(rt, {"--watch=0"}).code == 2);
  CHECK(status(rt, std::vector<std::string>{"--stacks"} + remote).code == 2);
  CHECK(status(rt, {"--bogus"}).code == 2);
  finish.open();
  CHECK(a.wait(60s) == 0);
  CHECK(b.wait(60s) == 0);
}

TEST_CASE("an elastic node whose agent died is shown gone, without ranks, once the others "
          "re-form", "[status]") {
  const auto endpoint = "127.0.0.1:" + std::to_string(free_port());
  ElasticCluster c("2:3", {"--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint});
  auto a = c.start("a", "elastic-gone");  // a serves the store (it binds first)
  REQUIRE(wait_until([&] { return !c.read("a", "rendezvous_started").empty(); }, 20s));
  auto b = c.start("b", "elastic-gone");
  auto victim = c.start("c", "elastic-gone");
  REQUIRE(c.wait_for_round("c", 3));
  const int round_of_3 = c.last_round("c");
  Runtime rt;
  const std::vector<std::string> remote{"--rdzv-endpoint=" + endpoint, "--rdzv-backend=c10d",
                                        "--rdzv-id=elastic-gone"};
  REQUIRE(wait_until([&] { return ranks_of(status_json(rt, remote)).size() == 3; }, 60s));
  ::kill(victim->pid(), SIGKILL);
  REQUIRE(c.wait_for_round("a", 2, 40s, round_of_3));
  json seen;
  const auto shown_gone = [&] {
    seen = status_json(rt, remote);
    if (seen.is_null()) return false;
    const auto& nodes = seen["jobs"][0]["nodes"];
    int gone = 0, members = 0;
    for (const auto& n : nodes) {
      if (n["state"] == "gone" && n["ranks"].empty() && n["node"] == -1) ++gone;
      if (n["round"].get<int>() > round_of_3 && n["ranks"].size() == 1) ++members;
    }
    const auto ranks = ranks_of(seen);
    return gone == 1 && members == 2 && ranks.size() == 2 && ranks.at(0).first == "running" &&
           ranks.at(1).first == "running";
  };
  CHECK(wait_until(shown_gone, 60s));
  INFO(seen.dump());
  const auto table = status(rt, remote);
  CHECK_THAT(table.output, Catch::Contains(" gone "));
  c.release_workers();
  CHECK(a->wait(60s) == 0);
  CHECK(b->wait(60s) == 0);
}

TEST_CASE("an etcd job from etcd, and after its end", "[status][etcd]") {
  if (etcd_binary().empty()) {
    WARN("etcd is not installed (scripts/install-deps.sh --tests installs etcd-server): skipped");
    return;
  }
  Runtime rt;
  Gate finish, fail;
  EtcdCluster etcd(1);
  const std::vector<std::string> common{"--nnodes=2", "--rdzv-backend=etcd",
                                        "--rdzv-endpoint=" + etcd.endpoints(),
                                        "--rdzv-id=etcd-watched", "--nproc-per-node=1"};
  DdprunProcess a(common + gated_worker(finish, fail, -1), rt.env());
  DdprunProcess b(common + gated_worker(finish, fail, -1), rt.env());
  const std::vector<std::string> remote{"--rdzv-endpoint=" + etcd.endpoints(), "--rdzv-backend=etcd",
                                        "--rdzv-id=etcd-watched"};
  REQUIRE(wait_until([&] { return all_waiting(status_json(rt, remote), 2, 0); }, 60s));
  finish.open();
  CHECK(a.wait(60s) == 0);
  CHECK(b.wait(60s) == 0);
  // etcd outlives the job, not its keys: the last agent out removes them, records included.
  const auto ended = status(rt, remote);
  CHECK(ended.code == 3);
  CHECK_THAT(ended.output, Catch::Contains("no status for job 'etcd-watched'"));
  CHECK_THAT(ended.output, Catch::Contains("it has ended"));
}

TEST_CASE("a slow scraper, a flood of requests and a wrong request leave a job unharmed",
          "[status][robust]") {
  Runtime rt;
  Gate finish, fail;
  const auto metrics = free_port();
  DdprunProcess job(std::vector<std::string>{"--nproc-per-node=2", "--master-port=0", "--rdzv-id=flooded",
                     "--metrics-port=" + std::to_string(metrics)} +
                        gated_worker(finish, fail, -1),
                    rt.env());
  const std::vector<std::string> here{"--rdzv-id=flooded"};
  REQUIRE(wait_until([&] { return all_waiting(status_json(rt, here), 2, 0); }, 60s));

  // Every rank's stack, on request, while the job goes on.
  if (on_path("gdb")) {
    const auto stacks = status(rt, {"--stacks", "--rdzv-id=flooded"});
    CHECK(stacks.code == 0);
    CHECK_THAT(stacks.output, Catch::Contains("== rank 0 (local rank 0) on "));
    CHECK_THAT(stacks.output, Catch::Contains("== rank 1 (local rank 1) on "));
    CHECK_THAT(stacks.output, Catch::Contains("#0 "));
    CHECK_THAT(stacks.output, Catch::Contains("stacks_"));
  } else {
    WARN("gdb is not installed: --stacks not tried");
  }

  // Slowloris: connections that send half a request and then nothing, beyond the limit.
  std::vector<int> slow;
  for (int i = 0; i < 40; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(metrics);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    ::send(fd, "GET /metrics HTTP/1.1\r\nHost:", 28, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  // Each is closed by the server: those beyond the limit at once, the others at their request
  // timeout. A read sees the end (end of file, or a reset for one closed with our bytes
  // unread), never its own 60-s receive timeout.
  const auto start = std::chrono::steady_clock::now();
  for (int fd : slow) {
    timeval tv{60, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    const auto n = ::recv(fd, &c, 1, 0);
    CHECK((n == 0 || (n < 0 && errno == ECONNRESET)));
    ::close(fd);
  }
  CHECK(std::chrono::steady_clock::now() - start < 30s);
  // A flood on the control socket: every request is answered or turned away, none hangs.
  std::vector<std::unique_ptr<DdprunProcess>> flood;
  for (int i = 0; i < 20; ++i) {
    flood.push_back(std::make_unique<DdprunProcess>(
        std::vector<std::string>{"status", "--json", "--rdzv-id=flooded"}, rt.env()));
  }
  for (auto& p : flood) {
    const int code = p->wait(60s);
    CHECK((code == 0 || code == 3));  // answered, or a socket too busy to answer in time
  }
  CHECK_THAT(http_get(metrics, "/nowhere"), Catch::Contains("404"));
  CHECK_THAT(http_get(metrics, "/metrics"), Catch::Contains("ddprun_workers"));
  // The job goes on and ends as it would have.
  CHECK(all_waiting(status_json(rt, here), 2, 0));
  finish.open();
  CHECK(job.wait(60s) == 0);
}

TEST_CASE("a real Prometheus server scrapes both agents and sees the rank count and a restart",
          "[status][prometheus]") {
  if (!on_path("prometheus")) {
    WARN("prometheus is not installed (scripts/test.sh installs Debian's prometheus): skipped");
    return;
  }
  Runtime rt;
  Gate finish, fail;
  const auto port = std::to_string(free_port());
  const auto m0 = free_port();
  const auto m1 = free_port();
  const std::vector<std::string> common{"--nnodes=2", "--master-port=" + port, "--max-restarts=1",
                                        "--rdzv-id=scraped"};
  DdprunProcess node0(common + std::vector<std::string>{"--node-rank=0", "--nproc-per-node=2",
                                                        "--metrics-port=" + std::to_string(m0)} +
                          gated_worker(finish, fail, 0),
                      rt.env());
  DdprunProcess node1(common + std::vector<std::string>{"--node-rank=1", "--nproc-per-node=1",
                                                        "--metrics-port=" + std::to_string(m1)} +
                          gated_worker(finish, fail, 0),
                      rt.env());
  const auto config = rt.dir.file("prometheus.yml");
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                           "scrape_configs:\n  - job_name: ddprun\n    static_configs:\n"
                           "      - targets: ['127.0.0.1:" << m0 << "', '127.0.0.1:" << m1 << "']\n";
  const auto api = free_port();
  Child prometheus(SpawnSpec{{"prometheus", "--config.file=" + config,
                              "--storage.tsdb.path=" + rt.dir.file("tsdb"),
                              "--web.listen-address=127.0.0.1:" + std::to_string(api)},
                             {},
                             rt.dir.file("prometheus.log")});
  INFO(read_file(rt.dir.file("prometheus.log")));
  REQUIRE(wait_until([&] { return promql(api, "sum(ddprun_workers{state=\"running\"})") == "3"; }, 120s));
  CHECK(promql(api, "count(up{job=\"ddprun\"} == 1)") == "2");
  CHECK(promql(api, "max(ddprun_restarts_total)") == "0");
  fail.open();
  REQUIRE(wait_until([&] { return promql(api, "max(ddprun_restarts_total)") == "1"; }, 120s));
  REQUIRE(wait_until([&] { return promql(api, "sum(ddprun_workers{state=\"running\"})") == "3"; }, 120s));
  CHECK(promql(api, "max(ddprun_failures_total{kind=\"exit_code\"})") == "1");
  finish.open();
  CHECK(node0.wait(60s) == 0);
  CHECK(node1.wait(60s) == 0);
}

TEST_CASE("the watch mode (--watch) in a real terminal redraws in place until the job ends", "[status][tmux]") {
  if (!on_path("tmux")) {
    WARN("tmux is not installed (scripts/test.sh installs it): skipped");
    return;
  }
  Runtime rt;
  Gate finish, fail;
  DdprunProcess job(std::vector<std::string>{"--nproc-per-node=2", "--master-port=0", "--rdzv-id=in-tmux"} +
                        gated_worker(finish, fail, -1),
                    rt.env());
  REQUIRE(wait_until([&] { return all_waiting(status_json(rt, {"--rdzv-id=in-tmux"}), 2, 0); },
                     60s));
  const auto sock = rt.dir.file("tmux.sock");
  // The pane outlives the command (it waits at a read) so that its last words can be read.
  const auto command = "XDG_RUNTIME_DIR=" + rt.path + " " + DDPRUN_BINARY +
                       " status --watch=0.3 --rdzv-id=in-tmux; echo \"status exited $?\"; read x";
  run(rt.dir, {"tmux", "-S", sock, "new-session", "-d", "-x", "150", "-y", "30", command});
  // The tmux server outlives a failed REQUIRE too: it is ended on any way out.
  struct EndServer {
    const TempDir& dir;
    std::string sock;
    ~EndServer() {
      try {
        run(dir, {"tmux", "-S", sock, "kill-server"});
      } catch (const std::exception& e) {
        WARN("tmux kill-server: " << e.what());
      }
    }
  } end_server{rt.dir, sock};
  const auto pane = [&] { return run(rt.dir, {"tmux", "-S", sock, "capture-pane", "-p"}); };
  std::string screen;
  REQUIRE(wait_until([&] {
    screen = pane();
    return screen.find("job in-tmux") != std::string::npos &&
           screen.find("rank 1 attempt 0 waiting") != std::string::npos &&
           screen.find("Ctrl-C to stop") != std::string::npos;
  }, 60s));
  // Drawn in place: one frame on the screen, however many were drawn.
  CHECK(count_of(screen, "job in-tmux") == 1);
  finish.open();
  CHECK(job.wait(60s) == 0);
  REQUIRE(wait_until([&] { return pane().find("status exited 3") != std::string::npos; }, 60s));
  CHECK_THAT(pane(), Catch::Contains("no running ddprun job"));
}
