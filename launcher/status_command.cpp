#include "launcher/status_command.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/failure_record.hpp"
#include "common/strings.hpp"
#include "launcher/option_reader.hpp"
#include "monitor/job_monitor.hpp"
#include "monitor/job_view.hpp"
#include "monitor/status_client.hpp"
#include "monitor/status_server.hpp"
#include "rendezvous/backend.hpp"
#include "store/store_auth.hpp"

namespace ddprun {

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr auto kAskBudget = 3s;     // one look at every source
constexpr auto kStacksBudget = 60s;  // gdb on every rank of a node
// --watch: how long looks may find no job while an agent does not answer before the job
// counts as over (a busy agent misses a look; a stopped one never answers).
constexpr auto kUnansweredFor = 10s;

struct StatusOptions {
  bool json = false;
  std::optional<double> watch;  // seconds between refreshes
  bool stacks = false;
  std::string endpoint;
  std::string run_id;
  std::string backend = "c10d";
  std::string token_file;
  std::string etcd_prefix = "/ddprun";
};

// What was found, or one line saying why nothing was.
struct Lookup {
  std::vector<JobView> jobs;
  std::vector<std::string> agents;  // local: the control sockets of agents with ranks asked for
  std::string nothing;
  std::vector<std::string> unanswered;  // local: the sockets that did not answer in time
};

// The agents that did not answer, one line each on stderr (the table goes to stdout).
void say_unanswered(const Lookup& found) {
  for (const auto& u : found.unanswered) std::fprintf(stderr, "ddprun status: %s\n", u.c_str());
}

Lookup look_locally(const StatusOptions& o) {
  Lookup out;
  const auto scan = scan_local(Deadline::after(kAskBudget));
  std::vector<NodeStatus> records;
  for (const auto& p : scan.processes) {
    bool wanted = false;
    for (const auto& n : p.nodes) {
      if (!o.run_id.empty() && n.run_id != o.run_id) continue;
      records.push_back(n);
      wanted = true;
    }
    // Stacks are taken by agents, of their own ranks; a --hosts command only relays records.
    if (wanted && p.is_agent()) out.agents.push_back(p.socket);
  }
  out.unanswered = scan.unanswered;
  for (auto& job : group_jobs(records, unix_seconds())) {
    if (!job.ended()) out.jobs.push_back(std::move(job));
  }
  if (out.jobs.empty()) {
    out.nothing = fmt::format(
        "no running ddprun job{} of this user on this machine (looked in {}); for a job "
        "elsewhere give its --rdzv-endpoint and --rdzv-id",
        o.run_id.empty() ? "" : " '" + o.run_id + "'", control_dir());
  }
  return out;
}

std::unique_ptr<store::Store> open_job_store(const StatusOptions& o, Deadline deadline) {
  std::map<std::string, std::string> env;
  if (const char* token = std::getenv(store::kTokenEnv)) env[store::kTokenEnv] = token;
  std::vector<std::string> warnings;
  // The job as its agents were started: --rdzv-endpoint is the master's for a static job.
  LaunchConfig job;
  job.store_secret = store::read_secret(o.token_file, "--token-file", env, warnings);
  for (const auto& w : warnings) std::fprintf(stderr, "ddprun status: %s\n", w.c_str());
  job.rdzv_id = o.run_id;
  job.rdzv_backend = parse_rdzv_backend(RawValue{o.backend, "--rdzv-backend"});
  if (job.is_static()) {
    const auto hp = parse_host_port(o.endpoint, "--rdzv-endpoint");
    job.master_addr = hp.host;
    job.master_port = hp.port.value_or(job.master_port);
  } else {
    job.rdzv_endpoint = o.endpoint;
    job.rdzv_conf.etcd_prefix = o.etcd_prefix;
  }
  return job_store_opener(job)(deadline);
}

Lookup look_in_store(const StatusOptions& o) {
  Lookup out;
  const auto where = fmt::format("job '{}' at {} ({})", o.run_id, o.endpoint, o.backend);
  std::vector<NodeStatus> records;
  try {
    const auto deadline = Deadline::after(kAskBudget);
    auto store = open_job_store(o, deadline);
    records = read_status_records(*store, deadline);
  } catch (const std::exception& e) {
    out.nothing = fmt::format("cannot read the status of {}: {} (a job whose store is gone has "
                              "ended)", where, e.what());
    return out;
  }
  auto jobs = group_jobs(records, unix_seconds());
  if (jobs.empty()) {
    out.nothing = fmt::format("no status for {}: the store answers but holds no record of that "
                              "job: it has ended (its keys go with it) or never ran with this "
                              "--rdzv-id",
                              where);
  } else if (jobs.front().ended()) {
    const auto& job = jobs.front();
    out.nothing = fmt::format("{} has ended: {} (exit code {})", where, job.state(), job.exit_code());
  } else {
    out.jobs = std::move(jobs);
  }
  return out;
}

Lookup look(const StatusOptions& o) {
  return o.endpoint.empty() ? look_locally(o) : look_in_store(o);
}

int terminal_width() {
  winsize size{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    return size.ws_col;
  }
  if (const char* columns = std::getenv("COLUMNS")) {
    if (auto n = parse_int(columns); n && *n > 20 && *n < 10000) return static_cast<int>(*n);
  }
  return 1 << 20;  // a file or a pipe: whole lines
}

json jobs_json(const std::vector<JobView>& jobs) {
  json out = json::array();
  for (const auto& job : jobs) {
    json nodes = json::array();
    for (const auto& n : job.nodes) nodes.push_back(n.to_json());
    out.push_back({{"run_id", job.run_id}, {"state", job.state()}, {"round", job.round()},
                   {"restarts", job.restarts()}, {"max_restarts", job.max_restarts()},
                   {"membership_changes", job.membership_changes()},
                   {"started", job.started()}, {"nodes", std::move(nodes)}});
  }
  return json{{"jobs", std::move(out)}};
}

// `in_place`: each line also erases what a longer line of the previous frame left after it.
void show(const Lookup& found, const StatusOptions& o, bool in_place = false) {
  std::string text = o.json ? dump_json(jobs_json(found.jobs))
                            : render_jobs(found.jobs, terminal_width(), unix_seconds());
  if (in_place) {
    std::string erased;
    for (char c : text) erased += c == '\n' ? std::string("\x1b[K\n") : std::string(1, c);
    text = std::move(erased);
  }
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

int show_stacks(const Lookup& found) {
  int failed = 0;
  for (const auto& socket : found.agents) {
    try {
      const auto body = json::parse(control_get(socket, "/stacks", Deadline::after(kStacksBudget)));
      for (const auto& s : body.at("stacks")) {
        std::printf("== rank %d (local rank %d) on %s, pid %d%s ==\n", s.at("rank").get<int>(),
                    s.at("local_rank").get<int>(), s.at("host").get<std::string>().c_str(),
                    s.at("pid").get<int>(),
                    s.at("ok").get<bool>() ? "" : (": " + s.at("error").get<std::string>()).c_str());
        std::fputs(s.at("text").get<std::string>().c_str(), stdout);
        std::printf("(also in %s)\n\n", s.at("file").get<std::string>().c_str());
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddprun status: stacks from %s: %s\n", socket.c_str(), e.what());
      ++failed;
    }
  }
  std::fflush(stdout);
  return failed == 0 ? kExitOk : kExitNoJob;
}

}  // namespace

int run_status(const std::vector<std::string>& args) {
  StatusOptions o;
  CLI::App app{"ddprun status: show a running job: its round, restarts, nodes and every rank "
               "(pid, state, CPU, memory, the time since its last output line, that line)",
               "ddprun status"};
  app.add_flag("--json", o.json, "Print JSON for tools");
  auto* watch = app.add_option("--watch", o.watch, "Refresh in place every SECONDS [1]")
                    ->type_name("SECONDS")
                    ->expected(0, 1)
                    ->default_str("1");
  app.add_flag("--stacks", o.stacks,
               "Print every rank's stack (taken with gdb on this machine's agents)");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", o.endpoint,
                 "The job's store: HOST[:PORT] (static: the master's;\netcd: HOST[:PORT],...); "
                 "default: this machine's jobs");
  app.add_option("--rdzv-id,--rdzv_id", o.run_id, "The job's id [with --rdzv-endpoint: none]");
  app.add_option("--rdzv-backend,--rdzv_backend", o.backend, "static, c10d or etcd [c10d]")
      ->check(CLI::IsMember({"static", "c10d", "etcd"}));
  app.add_option("--token-file,--token_file", o.token_file,
                 "The job's secret [$DDPRUN_TOKEN]");
  app.add_option("--etcd-prefix", o.etcd_prefix, "etcd: the jobs' key prefix [/ddprun]");
  app.footer("Exit codes: 0 a running job was shown; 2 bad usage; 3 no such running job (none "
             "on this machine, unknown, ended or unreachable).");
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      std::fputs(app.help().c_str(), stdout);
      return kExitOk;
    }
    std::fprintf(stderr, "ddprun status: %s\n", e.what());
    return kExitUsage;
  }
  if (watch->count() > 0 && !o.watch) o.watch = 1.0;
  if (o.watch && (*o.watch < 0.1 || *o.watch > 3600)) {
    std::fprintf(stderr, "ddprun status: --watch: the interval must be 0.1 to 3600 seconds\n");
    return kExitUsage;
  }
  if (!o.endpoint.empty() && o.run_id.empty()) o.run_id = "none";
  if (o.stacks && !o.endpoint.empty()) {
    std::fprintf(stderr, "ddprun status: --stacks asks the agents on this machine; run it on "
                         "the node whose ranks you want, without --rdzv-endpoint\n");
    return kExitUsage;
  }
  if (o.stacks && (o.json || o.watch)) {
    std::fprintf(stderr, "ddprun status: --stacks prints stacks once, as text\n");
    return kExitUsage;
  }

  try {
    if (!o.watch) {
      const auto found = look(o);
      say_unanswered(found);
      if (found.jobs.empty()) {
        std::fprintf(stderr, "ddprun status: %s\n", found.nothing.c_str());
        return kExitNoJob;
      }
      if (o.stacks) return show_stacks(found);
      show(found, o);
      return kExitOk;
    }
    // In place: the screen cleared once, then each frame from the top, erasing what the
    // previous one left.
    const bool terminal = isatty(STDOUT_FILENO) != 0;
    if (terminal) {
      // A frame goes to the terminal in one write at its flush, not line by line, so that no
      // half-drawn frame is ever on the screen.
      std::setvbuf(stdout, nullptr, _IOFBF, 1 << 16);
      std::fputs("\x1b[H\x1b[2J", stdout);
    }
    // Since when the looks have found no job while an agent did not answer.
    std::optional<Clock::time_point> unanswered_since;
    while (true) {
      const auto next = Clock::now() + std::chrono::milliseconds(static_cast<long>(*o.watch * 1000));
      const auto found = look(o);
      // An agent too busy to answer this once (its store slow to read) is not a job that ended;
      // one that stays silent (stopped, or another job's) does not keep the last frame up.
      if (found.jobs.empty() && !found.unanswered.empty()) {
        if (!unanswered_since) unanswered_since = Clock::now();
        if (Clock::now() - *unanswered_since < kUnansweredFor) {
          std::this_thread::sleep_until(next);
          continue;
        }
      }
      unanswered_since.reset();
      if (terminal) std::fputs("\x1b[H", stdout);
      if (found.jobs.empty()) {
        if (terminal) std::fputs("\x1b[J", stdout);
        std::fflush(stdout);
        say_unanswered(found);
        std::fprintf(stderr, "ddprun status: %s\n", found.nothing.c_str());
        return kExitNoJob;
      }
      show(found, o, terminal);
      if (terminal) {
        std::fputs(fmt::format("\n(every {}s; Ctrl-C to stop)\x1b[K\x1b[J", *o.watch).c_str(),
                   stdout);
        std::fflush(stdout);
      }
      std::this_thread::sleep_until(next);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "ddprun status: %s\n", e.what());
    return kExitNoJob;
  }
}

}  // namespace ddprun
