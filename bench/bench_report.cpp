// bench_report: turns the series that the bench programs appended to a results file into
// docs/benchmarks.md: the machine, a summary of the targets, and a table per figure
// (median, min and max of the recorded runs; the ratio to the comparison). A hand-written
// section between "<!-- analysis:begin -->" and "<!-- analysis:end -->" in the previous output
// file is carried over, so that regenerating the tables keeps it.

#include <algorithm>
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

constexpr int kFigures = 12;

struct FigureText {
  const char* title;
  const char* how;
};

const std::map<int, FigureText>& figure_texts() {
  static const std::map<int, FigureText> texts{
      {1, {"Launch overhead",
           "4 trivial workers (`--no-python true`), one node: wall time of the whole command, "
           "from posix_spawn to the exit seen on a pidfd."}},
      {2, {"Restart latency",
           "4 `bench_worker`s; rank 0 exits 3 when TORCHELASTIC_RESTART_COUNT=0; "
           "`--max-restarts=1`. Whole-command wall time; failure to restart as the workers see "
           "it (the failing worker stamps CLOCK_MONOTONIC before it exits, the restarted ones "
           "when they start) for both launchers, and from ddprun's --events-file."}},
      {3, {"Two-node start",
           "2 agents on 127.0.0.1 (static rendezvous, 2 + 1 workers), started back to back: "
           "from the first spawn until the last of the 3 workers runs (the workers stamp "
           "CLOCK_MONOTONIC as they start)."}},
      {4, {"Agent memory",
           "Peak RSS (`VmHWM` of /proc/<agent>/status, read every 10 ms) of the agent process "
           "while 4 workers sleep; the workers are not counted. torchrun's agent is its Python "
           "process."}},
      {5, {"Store throughput",
           "N threads, each with its own client, repeating set (own key, 64 bytes) / get (that "
           "key) / add (one shared counter) for a fixed time; the server runs in a separate "
           "process (`ddprun-store`; c10d's TCPStore from libtorch 1.13 in a small C++ host), "
           "both driven from the same C++ harness. c10d's `get` is its client's wait + get."}},
      {6, {"Rendezvous at scale",
           "N simulated agents, each a thread with its own TcpStoreClient connection (256 KiB "
           "stacks), run the real elastic protocol (`join_round`, `--nnodes=N:N`) against one "
           "`ddprun-store` process. Timed from the release of the N connected agents."}},
      {7, {"Node-death detection",
           "3 elastic agents (`--nnodes=2:3`, c10d backend, one worker each); a random moment "
           "within one keep-alive interval after the round formed, the harness takes "
           "CLOCK_MONOTONIC and SIGKILLs the third agent (not the store's host). Times from "
           "the survivors' --events-file. No torchrun comparison: its agents do not notice a "
           "dead peer, only joiners trigger a re-rendezvous (docs/torchrun-contract.md)."}},
      {8, {"Training throughput, CPU",
           "ResNet-18, 32x32 synthetic, batch 32 per rank, 2 ranks, Gloo: `ddp_resnet` vs "
           "`scripts/reference_ddp.py`, both under ddprun with the same OMP_NUM_THREADS."}},
      {9, {"Training throughput, GPU",
           "ResNet-50 and ResNet-152, bf16, channels_last, synthetic, NCCL: images/s of "
           "`ddp_resnet` vs the Python reference, on a GPU machine."}},
      {10, {"Hangs: verdict and stacks",
            "`bench/hang_bench.py`. The verdict: 3 Gloo ranks (torch 1.13) where rank 1 sleeps "
            "before an `all_reduce` the others wait in, `--hang-timeout=3`; from the last line "
            "any rank printed (its own `time.monotonic()`) plus the timeout to the `hang` event. "
            "torchrun 1.13 runs the same job and is watched for any report within a bounded "
            "wait. The stacks: the `stacks` event's duration, every rank at once, for Python "
            "ranks (every Python thread and every native thread) and native ones (`sleep`, "
            "every thread), once every rank has blocked."}},
      {11, {"Watching a job",
            "`bench/bench_watch.cpp`. The job's side: the launch of figure 1, the restart of "
            "figure 2 and an agent whose 2 workers sleep 3 s, each run plain and watched "
            "(`--metrics-port`, and every 100 ms a `ddprun status --json` process and a scrape "
            "of /metrics), by turns. The store's side: N simulated agents (TcpStoreClient "
            "connections, 32 per thread) keep a node record of 8 ranks (about 2 KB) in one "
            "`ddprun-store` process, each at its own moment within the period, as agents do: "
            "every 5 s while nothing changes, and every second when every node changes state "
            "at once (the most an agent writes); then one `ddprun status --rdzv-endpoint` "
            "reads all N."}},
      {12, {"Recovery at scale",
            "`bench/bench_recovery.cpp`. N real agents on 127.0.0.1, one process per simulated "
            "node, each with one `bench_worker` that sleeps; the job's last rank blocks opening "
            "a FIFO until the harness opens it, then exits 3 (`--max-restarts=1`). From that "
            "worker's own stamp before its exit to the last worker of the next attempt stamping "
            "its start (the harness learns of the stamps through inotify, so it spends no CPU "
            "while the agents share the 2 cores). Static: node 0 serves the store; c10d: the "
            "agent started first serves it; etcd: 3 members on loopback. Node death: an elastic "
            "c10d job (`--nnodes=N-1:N`, `last_call_timeout` 0.1 s) whose last agent is "
            "SIGKILLed, until every survivor's worker runs again. torchrun 1.13 runs the same "
            "job with its c10d backend. The phases and the CPU come from the agents' "
            "--events-file (`mono` and `cpu` of attempt_decided, restart and workers_started)."}},
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

std::string carried_analysis(const std::string& path) {
  const auto text = read_text(path);
  const std::string begin = "<!-- analysis:begin -->", end = "<!-- analysis:end -->";
  auto b = text.find(begin);
  auto e = text.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) return "";
  return text.substr(b, e + end.size() - b);
}

void write_figure(std::ostream& out, int figure, const std::vector<Series>& all) {
  const auto& t = figure_texts().at(figure);
  out << fmt::format("## {}. {}\n\n{}\n\n", figure, t.title, t.how);
  std::vector<std::string> cases;
  for (const auto& s : all) {
    if (s.figure == figure && std::find(cases.begin(), cases.end(), s.case_name) == cases.end()) {
      cases.push_back(s.case_name);
    }
  }
  if (cases.empty()) {
    out << "Not run.\n\n";
    return;
  }
  for (const auto& c : cases) {
    out << fmt::format("**{}**\n\n", c);
    out << "| metric | subject | median | min | max | ratio |\n|---|---|--:|--:|--:|---|\n";
    std::map<std::string, const Series*> first;  // per metric: the row ratios refer to
    std::vector<std::pair<std::string, std::string>> notes;  // note, the metrics it is about
    for (const auto& s : all) {
      if (s.figure != figure || s.case_name != c) continue;
      if (!first.count(s.metric)) first[s.metric] = &s;
      if (!s.measured || s.samples.empty()) {
        out << fmt::format("| {} | {} | {} | | | |\n", s.metric, s.subject,
                           s.note.empty() ? "not measured" : s.note);
        continue;
      }
      std::string ratio;
      const Series* base = first[s.metric];
      if (s.compare_with == "none") {
      } else if (!s.compare_with.empty()) {
        if (const auto* other = find(all, s, s.compare_with)) {
          ratio = fmt::format("{:.2f}x vs {}", advantage(s, *other), s.compare_with);
        }
      } else if (base != &s && base->measured && !base->samples.empty()) {
        ratio = fmt::format("{} {:.2f}x", base->subject, advantage(*base, s));
      }
      out << fmt::format("| {} ({}) | {} | {} | {} | {} | {} |\n", s.metric, s.unit, s.subject,
                         num(median(s.samples)),
                         num(*std::min_element(s.samples.begin(), s.samples.end())),
                         num(*std::max_element(s.samples.begin(), s.samples.end())), ratio);
      if (!s.note.empty()) {
        auto it = std::find_if(notes.begin(), notes.end(),
                               [&](const auto& n) { return n.first == s.note; });
        if (it == notes.end()) {
          notes.emplace_back(s.note, s.metric);
        } else if (it->second.find(s.metric) == std::string::npos) {
          it->second += ", " + s.metric;
        }
      }
    }
    out << "\n";
    for (const auto& s : all) {
      if (s.figure != figure || s.case_name != c || s.target_text.empty()) continue;
      auto v = check(all, s);
      out << fmt::format("Target ({}, {}): {}. Measured: {}; {}.\n\n", s.subject, s.metric,
                         s.target_text, v.measured, v.result);
    }
    if (!notes.empty()) {
      for (const auto& [note, metrics] : notes) out << "- " << metrics << ": " << note << "\n";
      out << "\n";
    }
  }
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
    const auto analysis = carried_analysis(output);
    std::ostringstream out;
    out << "# Benchmarks\n\n"
        << "Written by `scripts/bench.sh`" << (mode == "quick" ? " --quick" : "")
        << "; do not edit the tables by hand (the analysis section is kept when they are "
           "regenerated). ";
    out << fmt::format(
        "Every series is the median of {} recorded run(s) after {} warm-up run(s), with min and "
        "max. Ratios are medians: \"ddprun 12.00x\" on a comparison's row means ddprun is 12 "
        "times better (faster, smaller, or more operations per second) than that row. Timings "
        "use CLOCK_MONOTONIC, the clock of ddprun's `--events-file`.{}\n\n",
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
    if (!analysis.empty()) out << analysis << "\n\n";
    for (int f = 1; f <= kFigures; ++f) {
      write_figure(out, f, all);
      if (std::find(charted.begin(), charted.end(), f) != charted.end()) {
        // Linked relative to the report, which bench.sh writes next to the charts directory.
        const auto name = std::filesystem::path(charts).filename().string();
        out << fmt::format("![Figure {}: {}]({}/figure{}.svg)\n\n", f,
                           figure_texts().at(f).title, name, f);
      }
    }
    std::ofstream file(output);
    if (!file) throw Error("cannot write " + output);
    file << out.str();
  });
}
