#pragma once
// One measured series per line of a JSON-lines results file: every bench program appends to
// it, bench_report turns it into docs/benchmarks.md. The samples are the measured runs only
// (warm-up runs are not recorded); the report takes their median, min and max.

#include <optional>
#include <string>
#include <vector>

namespace ddprun::bench {

struct Series {
  int figure = 0;
  std::string case_name;  // e.g. "4 workers", "64 clients"; groups rows that are compared
  std::string metric;     // e.g. "wall time", "ops/s"
  std::string subject;    // "ddprun", "torchrun (default --monitor_interval 5 s)", "c10d TCPStore"
  std::string unit;       // "ms", "s", "MiB", "ops/s", "samples/s"
  bool lower_is_better = true;
  std::vector<double> samples;
  std::string note;       // how it was measured, or why it was not
  bool measured = true;   // false: a row that says why nothing was measured
  // The comparison the bench program means for this row: "" (default) the case's first row
  // (ddprun) against this one; "none": none; a subject: this row against that subject's row of
  // the same case and metric. Recorded for readers of the results file: the report sets the
  // subjects side by side and states ratios only in the targets' verdicts (target_vs).
  std::string compare_with;
  // The target for this series, checked on the median, if it has one.
  std::optional<double> target_max;    // median <= this (the worst sample with target_on_worst)
  bool target_on_worst = false;
  std::string target_vs;               // and/or: at least target_ratio times better than this subject
  double target_ratio = 0;
  std::string target_text;             // e.g. "<= 20 ms"
};

void append_series(const std::string& path, const Series& series);
std::vector<Series> read_series(const std::string& path);

double median(std::vector<double> v);
// Nearest-rank percentile, p in [0, 100].
double percentile(std::vector<double> v, double p);

}  // namespace ddprun::bench
