// bench_report: turns the series that the bench programs appended to a results file into
// docs/benchmarks.md: the machine, a summary of the targets, and one section per figure
// (what is measured, the command that measures it, one table of median (min-max) per metric
// and case, the figure's targets). Hand-written text is carried over from the previous output
// file, so that regenerating the tables keeps it: the block between "<!-- analysis:begin -->"
// and "<!-- analysis:end -->" goes after the targets, "<!-- analysis:begin figure N -->" ...
// "<!-- analysis:end figure N -->" at the end of figure N's section, and
// "<!-- analysis:begin after figures -->" ... "<!-- analysis:end after figures -->" after the
// last figure (measurements that scripts/bench.sh does not make).

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/results.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"

using namespace ddprun;
using namespace ddprun::bench;

namespace {

constexpr int kFigures = 15;

struct FigureText {
  const char* title;
  const char* how;  // what is measured, against what
  const char* runs;  // what `scripts/bench.sh --figures N` runs for it
};

const std::map<int, FigureText>& figure_texts() {
  static const std::map<int, FigureText> texts{
      {1, {"Launch overhead",
           "4 trivial workers (`--no-python true`), one node: wall time of the whole command, "
           "from posix_spawn to the exit seen on a pidfd, against torchrun (default and 0.05 s "
           "monitor interval) and Open MPI's `mpirun -np 4 true`; `--events-file` splits "
           "ddprun's time. From 1 to 32 workers, ddprun runs by turns with the floor, a C "
           "program that only posix_spawns the workers and waits.",
           "`bench_launch --figure launch --floor spawn_floor --mpirun mpirun`"}},
      {2, {"Restart latency",
           "4 `bench_worker`s; rank 0 exits 3 when TORCHELASTIC_RESTART_COUNT=0; "
           "`--max-restarts=1`; against torchrun (default and 0.05 s monitor interval). "
           "Whole-command wall time; failure to restart as the workers see it (the failing "
           "worker stamps CLOCK_MONOTONIC before it exits, the restarted ones when they start), "
           "and from ddprun's --events-file. The target is checked on runs of ddprun alone: a "
           "torchrun run leaves the machine busy for the run after it.",
           "`bench_launch --figure restart`"}},
      {3, {"Two-node start",
           "2 agents on 127.0.0.1 (static rendezvous, 2 + 1 workers), started back to back, "
           "against torchrun: from the first spawn until the last of the 3 workers runs (the "
           "workers stamp CLOCK_MONOTONIC as they start).",
           "`bench_launch --figure two-node`"}},
      {4, {"Agent memory",
           "Peak RSS (`VmHWM` of /proc/<agent>/status, read every 10 ms) of the agent process "
           "while 4 workers sleep, against torchrun's agent (its Python process); the workers "
           "are not counted.",
           "`bench_memory --torchrun fast --sleep 2`"}},
      {5, {"Store throughput",
           "N threads, each with its own client, repeating set (own key, 64 bytes) / get (that "
           "key) / add (one shared counter) for 1 s; the server runs in a separate process "
           "(`ddprun-store`, or c10d's TCPStore from libtorch 1.13 in the same binary), both "
           "driven from the same C++ harness, by turns. c10d's `get` is its client's wait + "
           "get. A minimal blocking client against ddprun's server shows the client's share.",
           "`bench_store_c10d --clients 1 16 64 --seconds 1 --diagnostic`, or without libtorch "
           "at build time `bench_store`, ddprun's store alone"}},
      {6, {"Rendezvous at scale",
           "N simulated agents, each a thread with its own TcpStoreClient connection (256 KiB "
           "stacks), run the real elastic protocol (`join_round`, `--nnodes=N:N`) against one "
           "`ddprun-store` process, and over a 3-member etcd on loopback. Timed from the "
           "release of the N connected agents.",
           "`bench_rendezvous --agents 256 1024 4096 16384`, and `--etcd-members 3 --agents "
           "256 1024 4096`"}},
      {7, {"Node-death detection",
           "3 elastic agents (`--nnodes=2:3`, c10d backend, one worker each); a random moment "
           "within one keep-alive interval after the round formed, the harness takes "
           "CLOCK_MONOTONIC and SIGKILLs the third agent (not the store's host). Times from "
           "the survivors' --events-file. No torchrun comparison: its agents do not notice a "
           "dead peer, only joiners trigger a re-rendezvous (docs/torchrun-contract.md).",
           "`bench_node_death --interval 1 --attempts 3 --last-call 0.1`, with "
           "`--etcd-members 3`, and `--interval 5` when 150 s of `--budget` are left"}},
      {8, {"Training throughput, CPU",
           "ResNet-18, 32x32 synthetic, batch 32 per rank, 2 ranks, Gloo: `ddp_resnet` against "
           "`scripts/reference_ddp.py`, both under ddprun with the same OMP_NUM_THREADS.",
           "`bench_train --threads 1 --steps 10 --epochs 2`, not in `--quick`; "
           "`DDP_RESNET=PATH` picks the worker"}},
      {9, {"Training throughput, GPU",
           "ResNet-50 and ResNet-152, bf16, channels_last, synthetic, NCCL: images/s of "
           "`ddp_resnet` against the Python reference. `scripts/bench.sh` measures nothing "
           "here; reproduce on a GPU machine with `scripts/gpu_bench.sh DDPRUN DDP_RESNET "
           "--steps 12`.",
           nullptr}},
      {10, {"Hangs: verdict and stacks",
            "`bench/hang_bench.py`. The verdict: 3 Gloo ranks (torch 1.13) where rank 1 sleeps "
            "before an `all_reduce` the others wait in, `--hang-timeout=3`; from the last line "
            "any rank printed (its own `time.monotonic()`) plus the timeout to the `hang` event. "
            "torchrun 1.13 runs the same job and is watched for any report within a bounded "
            "wait. The stacks: the `stacks` event's duration, every rank at once, for Python "
            "ranks (every Python thread and every native thread) and native ones (`sleep`, "
            "every thread), once every rank has blocked.",
            "`bench/hang_bench.py --runs 3 --ranks 2 4 8 --torchrun-wait 30`, with gdb and "
            "torch, not in `--quick`"}},
      {11, {"Watching a job",
            "`bench/bench_watch.cpp`. The job's side: the launch of figure 1, the restart of "
            "figure 2 and an agent whose 2 workers sleep 3 s, each run plain and watched "
            "(`--metrics-port`, and every 100 ms a `ddprun status --json` process and a scrape "
            "of /metrics), by turns. The store's side: N simulated agents (TcpStoreClient "
            "connections, 32 per thread) keep a node record of 8 ranks (about 2 KB) in one "
            "`ddprun-store` process, each at its own moment within the period, as agents do: "
            "every 5 s while nothing changes, and every second when every node changes state "
            "at once (the most an agent writes); then one `ddprun status --rdzv-endpoint` "
            "reads all N.",
            "`bench_watch --agents 1024`"}},
      {12, {"Recovery at scale",
            "`bench/bench_recovery.cpp`. N real agents on 127.0.0.1, one process per simulated "
            "node, each with one `bench_worker` that sleeps; the job's last rank blocks opening "
            "a FIFO until the harness opens it, then exits 3 (`--max-restarts=1`). From that "
            "worker's own stamp before its exit to the last worker of the next attempt stamping "
            "its start (the harness learns of the stamps through inotify, so it spends no CPU "
            "while the agents share the cores). Static: node 0 serves the store; c10d: the "
            "agent started first serves it; etcd: 3 members on loopback. Node death: an elastic "
            "c10d job (`--nnodes=N-1:N`, `last_call_timeout` 0.1 s) whose last agent is "
            "SIGKILLed, until every survivor's worker runs again. torchrun 1.13 runs the same "
            "job with its c10d backend. The phases and the CPU come from the agents' "
            "--events-file (`mono` and `cpu` of attempt_decided, restart and workers_started).",
            "`bench_recovery --backend c10d|static|etcd --nodes 2 8 16 128 256 512 1024`, "
            "`--node-death --interval 1 --nodes 16 128 1024` and `--torchrun python3 "
            "[--monitor-interval 0.1] --nodes 2 8 16`"}},
      {13, {"Failure to the next training step",
            "`bench/first_step.py` under each launcher, one node: torch 1.13, Gloo, 3 ranks, "
            "`init_process_group(\"gloo\")` over env://, a small DDP model, a checkpoint every "
            "5 steps; on the first attempt rank 1 SIGKILLs itself at step 20 "
            "(`--max-restarts=1`). The script stamps CLOCK_MONOTONIC before `import torch`, "
            "after it, after init_process_group and after the attempt's first step. Subjects: "
            "ddprun with `--warm-standby` (the script run by ddprun's own `python -u`, every "
            "attempt's workers taken from standbys that imported torch ahead); "
            "ddprun (the workers' store, TORCHELASTIC_USE_AGENT_STORE=True); ddprun with rank 0 "
            "hosting the workers' store (TORCHELASTIC_USE_AGENT_STORE=False, as torchrun 1.13's "
            "c10d backend does); torchrun at a 0.1 s monitor interval and at its default. "
            "20 runs of each (5 of torchrun at its default interval). Where network namespaces "
            "can be made, ddprun with and without standbys again on two nodes "
            "(`scripts/netns-cluster.sh`, 2 + 1 ranks, rank 1 on the first). Then `ddp_resnet` "
            "(ResNet-18, 32x32 synthetic images, batch 8, 2 ranks, a checkpoint every 3 steps, "
            "rank 1 fails at step 5), cold and from standbys, 5 runs each, stamped by its "
            "`--stamp_dir`: the failure, every rank back in its process group with the model "
            "built, every rank with the checkpoint loaded (rank 0 reads it and broadcasts its "
            "bytes) and DDP set up, and the end of the attempt's first step.",
            "`bench_first_step --script bench/first_step.py --ddp-resnet build/workers/ddp_resnet "
            "--netns-cluster scripts/netns-cluster.sh`, the latter inside "
            "`scripts/netns-cluster.sh run TAG 2`"}},
      {14, {"The console of many ranks",
            "`bench/bench_console.cpp`, ddprun's stdout read as a terminal would get it, each "
            "line timed as it arrives. At scale: 1,024 ranks on one node "
            "(`bench/console_worker.cpp`) wait at a gate, pass it together, print the same "
            "line, 100 of them then a line of their own, and go on for 2 s; ddprun with "
            "`--fold-output` and with `--fold-output=off` (what a pipe gets by default, as "
            "torchrun prints), both with `--tee=1` so that every rank's log is compared with "
            "what it wrote. Throughput: 8 ranks print a training-like line (step, loss, learning "
            "rate, gradient norm) every 2 ms each, 720,000 lines over 3 minutes; the agent's "
            "CPU (/proc/<pid>/task/*/schedstat, read every 20 ms until it exits) per line "
            "written, and every line accounted for: printed with its rank's prefix or named by "
            "a summary. The same through `--hosts` (two hosts of 4 ranks on loopback, "
            "`testing/local_ssh.sh` standing in for ssh, 120,000 lines over 30 s): the "
            "command's CPU per line, relaying every line or folding the agents' tagged lines. "
            "torchrun has no folding: without it, it prints every line as ddprun does with "
            "`--fold-output=off`.",
            "`bench_console --ranks 1024 --distinct 100 --stream-lines 90000 --local-ssh "
            "testing/local_ssh.sh`"}},
      {15, {"The node check",
            "What `--node-check=warn` adds to a job's start, its links measured at the default "
            "4 MiB: the slowest node's `node_check` seconds from the events files (the check "
            "runs between the first rendezvous and the first workers). 64 nodes in network "
            "namespaces (`scripts/netns-cluster.sh`: an address each, one bridge), and 256 "
            "agents on loopback, each a process of its own; a static job whose workers are "
            "`true`, 3 runs each. Then `tests/netns/node_check_links.sh` 20 times: five "
            "nodes, the third one's veth (node 2) rate-limited to 100 Mbit/s both ways by "
            "`tc tbf`, named alone or not; and 20 runs with nothing slowed, anything named "
            "or not.",
            "`bench/node_check_bench.py --netns-nodes 64 --loopback-agents 256 --runs 3 "
            "--detection-runs 20`"}},
  };
  return texts;
}

std::string num(double v) {
  if (std::isnan(v)) return "-";
  const double a = std::fabs(v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3f}", v);
}

// How many times better `a` is than `b` (both medians).
double advantage(const Series& a, const Series& b) {
  const double ma = median(a.samples), mb = median(b.samples);
  return a.lower_is_better ? mb / ma : ma / mb;
}

const Series* find(const std::vector<Series>& all, const Series& like, const std::string& subject) {
  for (const auto& s : all) {
    if (s.figure == like.figure && s.case_name == like.case_name && s.metric == like.metric &&
        s.subject == subject && s.measured && !s.samples.empty()) {
      return &s;
    }
  }
  return nullptr;
}

struct Verdict {
  std::string measured;
  std::string result;  // "met", "missed: ...", "not measured: ..."
};

Verdict check(const std::vector<Series>& all, const Series& s) {
  if (!s.measured || s.samples.empty()) {
    return {"-", s.note.empty() ? "not measured" : s.note};
  }
  const double m = median(s.samples);
  Verdict v{fmt::format("{} {}", num(m), s.unit), ""};
  std::vector<std::string> missed;
  std::string unmeasured;
  if (s.target_on_worst) {
    const double worst = s.lower_is_better
                             ? *std::max_element(s.samples.begin(), s.samples.end())
                             : *std::min_element(s.samples.begin(), s.samples.end());
    v.measured += fmt::format(", worst {} {}", num(worst), s.unit);
    if (s.target_max && worst > *s.target_max) {
      missed.push_back(fmt::format("worst run {} {} is {} {} over {} {}", num(worst), s.unit,
                                   num(worst - *s.target_max), s.unit, num(*s.target_max),
                                   s.unit));
    }
  } else if (s.target_max && m > *s.target_max) {
    missed.push_back(fmt::format("median {} {} is {} {} over {} {} ({:.1f}x the target)", num(m),
                                 s.unit, num(m - *s.target_max), s.unit, num(*s.target_max),
                                 s.unit, m / *s.target_max));
  }
  if (!s.target_vs.empty()) {
    if (const Series* other = find(all, s, s.target_vs)) {
      const double r = advantage(s, *other);
      v.measured += fmt::format("; {:.2f}x {}", r, s.target_vs);
      if (r < s.target_ratio) {
        missed.push_back(fmt::format("{:.2f}x, needs {:.1f}x ({:.0f}% short)", r, s.target_ratio,
                                     100 * (1 - r / s.target_ratio)));
      }
    } else {
      unmeasured = fmt::format("the ratio is not measured (no '{}' series)", s.target_vs);
    }
  }
  if (!missed.empty()) {
    v.result = "**missed**: " + missed.front();
    for (std::size_t i = 1; i < missed.size(); ++i) v.result += "; " + missed[i];
  } else if (!unmeasured.empty()) {
    v.result = s.target_max ? "**met** for the limit; " + unmeasured : "not measured: " + unmeasured;
  } else {
    v.result = "**met**";
  }
  return v;
}

// The hand-written block named `name` ("" for the one after the targets) in the previous
// output, markers included, or "" when it has none.
std::string carried_block(const std::string& text, const std::string& name) {
  const auto tag = name.empty() ? std::string() : " " + name;
  const auto begin = "<!-- analysis:begin" + tag + " -->";
  const auto end = "<!-- analysis:end" + tag + " -->";
  const auto b = text.find(begin);
  const auto e = text.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) return "";
  return text.substr(b, e + end.size() - b);
}

// Appends x unless v holds it: the order of first appearance, which is the order the bench
// programs recorded their series in.
void add_once(std::vector<std::string>& v, const std::string& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// A case's leading number ("256 agents" -> 256), or 0 when it has none.
double case_size(const std::string& case_name) {
  return !case_name.empty() && std::isdigit(static_cast<unsigned char>(case_name.front()))
             ? std::strtod(case_name.c_str(), nullptr)
             : 0;
}

// One cell: "median (min-max)", the median alone when the three read the same (one run), or
// why the series was not measured.
std::string cell(const Series& s) {
  if (!s.measured || s.samples.empty()) return s.note.empty() ? "not measured" : s.note;
  const auto med = num(median(s.samples));
  const auto lo = num(*std::min_element(s.samples.begin(), s.samples.end()));
  const auto hi = num(*std::max_element(s.samples.begin(), s.samples.end()));
  return lo == med && hi == med ? med : fmt::format("{} ({}-{})", med, lo, hi);
}

// One table per figure: a row per metric and case, a column per subject, so that a series over
// a size (workers, clients, agents, nodes) reads down one column. Cases of one metric that all
// start with a number are sorted by it; everything else keeps the order the bench programs
// recorded it in.
void write_table(std::ostream& out, int figure, const std::vector<Series>& all) {
  std::vector<const Series*> series;
  std::vector<std::string> subjects, metrics, cases;
  for (const auto& s : all) {
    if (s.figure != figure) continue;
    series.push_back(&s);
    add_once(subjects, s.subject);
    add_once(metrics, s.metric);
    add_once(cases, s.case_name);
  }
  // One case only: it heads the metrics' column.
  const bool one_case = cases.size() == 1;
  out << "| " << (one_case ? cases.front() : "metric") << " |" << (one_case ? "" : " case |");
  for (const auto& subject : subjects) out << " " << subject << " |";
  out << "\n|---|" << (one_case ? "" : "---|");
  for (std::size_t i = 0; i < subjects.size(); ++i) out << "--:|";
  out << "\n";
  for (const auto& metric : metrics) {
    std::vector<std::string> metric_cases;
    std::string unit;
    for (const auto* s : series) {
      if (s->metric != metric) continue;
      add_once(metric_cases, s->case_name);
      if (unit.empty()) unit = s->unit;
    }
    if (std::all_of(metric_cases.begin(), metric_cases.end(),
                    [](const auto& c) { return case_size(c) > 0; })) {
      std::stable_sort(metric_cases.begin(), metric_cases.end(), [](const auto& a, const auto& b) {
        return case_size(a) < case_size(b);
      });
    }
    bool first = true;
    for (const auto& c : metric_cases) {
      out << "| " << (first ? (unit.empty() ? metric : fmt::format("{} ({})", metric, unit)) : "")
          << " |" << (one_case ? "" : " " + c + " |");
      first = false;
      for (const auto& subject : subjects) {
        const auto it = std::find_if(series.begin(), series.end(), [&](const Series* s) {
          return s->metric == metric && s->case_name == c && s->subject == subject;
        });
        out << " " << (it == series.end() ? "" : cell(**it)) << " |";
      }
      out << "\n";
    }
  }
  out << "\n";
}

// What a metric means, once per figure: "- metric: note". Metrics that share a note share its
// line. Where one metric's series carry different notes, the note that most of them carry goes
// by the metric's name alone, and each other note names what it is about: its cases when no
// other note covers them, else its subjects.
void write_notes(std::ostream& out, int figure, const std::vector<Series>& all) {
  struct Note {
    std::string text, metric;
    std::vector<std::string> subjects, cases;
    int series = 0;
  };
  std::vector<std::string> metrics;  // the table's order, which the notes keep
  for (const auto& s : all) {
    if (s.figure == figure) add_once(metrics, s.metric);
  }
  std::vector<Note> notes;
  for (const auto& s : all) {
    if (s.figure != figure || s.note.empty() || !s.measured) continue;
    auto it = std::find_if(notes.begin(), notes.end(), [&](const Note& n) {
      return n.text == s.note && n.metric == s.metric;
    });
    if (it == notes.end()) it = notes.insert(notes.end(), Note{s.note, s.metric, {}, {}, 0});
    add_once(it->subjects, s.subject);
    add_once(it->cases, s.case_name);
    ++it->series;
  }
  std::stable_sort(notes.begin(), notes.end(), [&](const Note& a, const Note& b) {
    return std::find(metrics.begin(), metrics.end(), a.metric) <
           std::find(metrics.begin(), metrics.end(), b.metric);
  });
  std::vector<std::pair<std::string, std::string>> lines;  // label, note
  for (const auto& n : notes) {
    std::string label = n.metric;
    int most_of_others = -1;
    std::vector<std::string> other_cases;
    for (const auto& m : notes) {
      if (m.metric != n.metric || &m == &n) continue;
      most_of_others = std::max(most_of_others, m.series);
      for (const auto& c : m.cases) add_once(other_cases, c);
    }
    if (most_of_others >= n.series) {
      const bool own_cases = std::none_of(n.cases.begin(), n.cases.end(), [&](const auto& c) {
        return std::find(other_cases.begin(), other_cases.end(), c) != other_cases.end();
      });
      label += fmt::format(" ({})", fmt::join(own_cases ? n.cases : n.subjects, "; "));
    }
    auto it = std::find_if(lines.begin(), lines.end(),
                           [&](const auto& l) { return l.second == n.text; });
    if (it == lines.end()) {
      lines.emplace_back(label, n.text);
    } else {
      it->first += ", " + label;
    }
  }
  for (const auto& [label, text] : lines) out << "- " << label << ": " << text << "\n";
  if (!lines.empty()) out << "\n";
}

void write_figure(std::ostream& out, int figure, const std::vector<Series>& all) {
  const auto& t = figure_texts().at(figure);
  out << fmt::format("## {}. {}\n\n{}", figure, t.title, t.how);
  if (t.runs) {
    out << fmt::format(" Reproduce: `scripts/bench.sh --figures {0} --output /tmp/figure{0}.md` "
                       "runs {1}.",
                       figure, t.runs);
  }
  out << "\n\n";
  std::vector<std::string> cases;
  for (const auto& s : all) {
    if (s.figure == figure) add_once(cases, s.case_name);
  }
  if (cases.empty()) {
    out << "Not run.\n\n";
    return;
  }
  write_table(out, figure, all);
  bool any_target = false;
  for (const auto& s : all) {
    if (s.figure != figure || s.target_text.empty()) continue;
    auto v = check(all, s);
    out << fmt::format("- Target ({}{}; {}): {}. Measured: {}; {}.\n",
                       cases.size() > 1 ? s.case_name + "; " : "", s.subject, s.metric,
                       s.target_text, v.measured, v.result);
    any_target = true;
  }
  if (any_target) out << "\n";
  write_notes(out, figure, all);
}

// The scaling figures drawn as charts: which metric, over what (a number read from the case,
// "256 agents" -> 256), on which axes.
struct ChartSpec {
  int figure;
  const char* metric;
  const char* x_label;
  bool log_y;
};

constexpr ChartSpec kCharts[] = {
    {1, "wall time", "workers", false},
    {5, "throughput", "clients", false},
    {6, "release to every agent holding its rank", "agents", true},
    {12, "failure to every worker running again", "nodes", true},
};

// A gnuplot string. gnuplot runs `...` in a command line as a shell command, even inside
// quotes, so backquotes (Markdown's code marks in case names) become plain quotes (a path
// holding one would not be found: bench.sh's paths hold none).
std::string gnuplot_quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '`' ? '\'' : c;
  }
  return out + "\"";
}

// Writes DIR/figureN.gp (and its data, one file per subject) for every chart with at least two
// points of one subject; gnuplot draws DIR/figureN.svg from it. Returns the figures written.
std::vector<int> write_charts(const std::string& dir, const std::vector<Series>& all) {
  std::vector<int> written;
  for (const auto& chart : kCharts) {
    std::map<std::string, std::map<double, double>> by_subject;  // subject -> x -> median
    std::string unit;
    for (const auto& s : all) {
      if (s.figure != chart.figure || s.metric != chart.metric || !s.measured ||
          s.samples.empty()) {
        continue;
      }
      const double x = std::strtod(s.case_name.c_str(), nullptr);
      if (x <= 0) continue;
      by_subject[s.subject][x] = median(s.samples);
      unit = s.unit;
    }
    std::vector<std::string> plots;
    int k = 0;
    for (const auto& [subject, points] : by_subject) {
      if (points.size() < 2) continue;
      const auto data = fmt::format("{}/figure{}-{}.dat", dir, chart.figure, k++);
      std::ofstream d(data);
      for (const auto& [x, y] : points) d << x << ' ' << y << '\n';
      plots.push_back(fmt::format("{} using 1:2 with linespoints linewidth 2 pointtype 7 title {}",
                                  gnuplot_quote(data), gnuplot_quote(subject)));
    }
    if (plots.empty()) continue;
    const auto& title = figure_texts().at(chart.figure).title;
    std::ofstream gp(fmt::format("{}/figure{}.gp", dir, chart.figure));
    // noenhanced: names such as spawn_floor are text, not subscripts.
    gp << "set terminal svg size 720,420 dynamic noenhanced font 'sans,12' background "
          "'#ffffff'\n"
       << "set output " << gnuplot_quote(fmt::format("{}/figure{}.svg", dir, chart.figure)) << "\n"
       << "set title " << gnuplot_quote(fmt::format("Figure {}. {}: {}", chart.figure, title,
                                                    chart.metric))
       << "\n"
       << "set xlabel " << gnuplot_quote(chart.x_label) << "\n"
       << "set ylabel " << gnuplot_quote(fmt::format("{}, median of the runs", unit)) << "\n"
       << "set logscale x 2\nset grid\nset key top left\n"
       << (chart.log_y ? "set logscale y 10\n" : "set yrange [0:*]\n")
       << "plot " << fmt::format("{}", fmt::join(plots, ", \\\n     ")) << "\n";
    written.push_back(chart.figure);
  }
  return written;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_report: results -> docs/benchmarks.md"};
  std::string results, machine, output, mode = "full";
  int runs = 5, warmup = 1;
  double elapsed = 0;
  app.add_option("--results", results, "the JSON-lines results file")->required();
  app.add_option("--machine", machine, "tab-separated 'key<TAB>value' lines")->required();
  app.add_option("--output", output, "the Markdown file to write")->required();
  app.add_option("--runs", runs, "recorded runs per series")->capture_default_str();
  app.add_option("--warmup", warmup, "warm-up runs")->capture_default_str();
  app.add_option("--mode", mode, "full or quick")->capture_default_str();
  app.add_option("--elapsed", elapsed, "seconds the suite took");
  std::string charts;
  app.add_option("--charts", charts,
                 "write gnuplot scripts for the scaling figures here (bench.sh draws them as "
                 "SVG), and link the SVGs from the report");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main("bench_report", [&] {
    auto all = read_series(results);
    std::vector<int> charted;
    if (!charts.empty()) charted = write_charts(charts, all);
    const auto previous = read_text(output);
    std::ostringstream out;
    out << "# Benchmarks\n\n"
        << "Written by `scripts/bench.sh`" << (mode == "quick" ? " --quick" : "")
        << "; do not edit the tables by hand (the hand-written paragraphs are kept when they "
           "are regenerated). ";
    out << fmt::format(
        "Every cell is the median of {} recorded run(s) after {} warm-up run(s), with min-max in "
        "parentheses. A ratio is of medians: \"9.00x mpirun\" means ddprun is 9 times better "
        "(faster, smaller, or more operations per second) than mpirun. Timings use "
        "CLOCK_MONOTONIC, the clock of ddprun's `--events-file`.{}\n\n",
        runs, warmup, elapsed > 0 ? fmt::format(" The suite took {:.0f} s.", elapsed) : "");
    if (mode == "quick") {
      out << "**Quick mode: small sizes and few runs, a smoke test; these are not the "
             "figures.**\n\n";
    }
    out << "## Machine\n\n| | |\n|---|---|\n";
    std::ifstream m(machine);
    std::string line;
    while (std::getline(m, line)) {
      auto tab = line.find('\t');
      if (tab != std::string::npos) {
        out << fmt::format("| {} | {} |\n", line.substr(0, tab), line.substr(tab + 1));
      }
    }
    out << "\n## Targets\n\n| # | case | subject | target | measured | result |\n"
           "|---|---|---|---|---|---|\n";
    for (int f = 1; f <= kFigures; ++f) {
      for (const auto& s : all) {
        if (s.figure != f || s.target_text.empty()) continue;
        auto v = check(all, s);
        out << fmt::format("| {} | {} | {} | {} | {} | {} |\n", s.figure, s.case_name, s.subject,
                           s.target_text, v.measured, v.result);
      }
    }
    out << "\n";
    if (const auto block = carried_block(previous, ""); !block.empty()) out << block << "\n\n";
    for (int f = 1; f <= kFigures; ++f) {
      write_figure(out, f, all);
      if (std::find(charted.begin(), charted.end(), f) != charted.end()) {
        // Linked relative to the report, which bench.sh writes next to the charts directory.
        const auto name = std::filesystem::path(charts).filename().string();
        out << fmt::format("![Figure {}: {}]({}/figure{}.svg)\n\n", f,
                           figure_texts().at(f).title, name, f);
      }
      const auto block = carried_block(previous, fmt::format("figure {}", f));
      if (!block.empty()) out << block << "\n\n";
    }
    if (const auto block = carried_block(previous, "after figures"); !block.empty()) {
      out << block << "\n";
    }
    auto text = out.str();
    while (text.size() > 1 && text[text.size() - 2] == '\n') text.pop_back();  // one final newline
    std::ofstream file(output);
    if (!file) throw Error("cannot write " + output);
    file << text;
  });
}
