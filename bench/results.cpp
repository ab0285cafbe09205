#include "bench/results.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ddprun::bench {

using nlohmann::json;

void append_series(const std::string& path, const Series& s) {
  json j{{"figure", s.figure},   {"case", s.case_name}, {"metric", s.metric},
         {"subject", s.subject}, {"unit", s.unit},      {"lower_is_better", s.lower_is_better},
         {"samples", s.samples}, {"note", s.note},      {"measured", s.measured},
         {"compare_with", s.compare_with}, {"target_vs", s.target_vs},
         {"target_ratio", s.target_ratio}, {"target_text", s.target_text}};
  if (s.target_max) j["target_max"] = *s.target_max;
  if (s.target_on_worst) j["target_on_worst"] = true;
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error("cannot append to " + path);
  out << j.dump() << '\n';
}

std::vector<Series> read_series(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  std::vector<Series> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = json::parse(line);
    Series s;
    s.figure = j.at("figure");
    s.case_name = j.at("case");
    s.metric = j.at("metric");
    s.subject = j.at("subject");
    s.unit = j.at("unit");
    s.lower_is_better = j.at("lower_is_better");
    s.samples = j.at("samples").get<std::vector<double>>();
    s.note = j.value("note", "");
    s.measured = j.value("measured", true);
    s.compare_with = j.value("compare_with", "");
    if (j.contains("target_max")) s.target_max = j.at("target_max").get<double>();
    s.target_on_worst = j.value("target_on_worst", false);
    s.target_vs = j.value("target_vs", "");
    s.target_ratio = j.value("target_ratio", 0.0);
    s.target_text = j.value("target_text", "");
    out.push_back(std::move(s));
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return v[rank - 1];
}

}  // namespace ddprun::bench
