#include "agent/node_check.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/limits.hpp"
#include "store/prefix_store.hpp"

namespace ddprun {
namespace {

std::uint64_t soft_of(const rlimit& r) {
  return r.rlim_cur == RLIM_INFINITY ? kUnlimited : static_cast<std::uint64_t>(r.rlim_cur);
}

std::uint64_t soft_limit(int resource) {
  rlimit r{};
  return ::getrlimit(resource, &r) == 0 ? soft_of(r) : 0;
}

std::uint64_t available_bytes(const struct statvfs& s) {
  return static_cast<std::uint64_t>(s.f_bavail) * static_cast<std::uint64_t>(s.f_frsize);
}

// Whether a file can be created in `dir`: by doing it (permissions alone do not tell, for root
// or a read-only mount). The file is unnamed where the kernel allows (O_TMPFILE), so nothing is
// left behind even if the agent dies here.
std::string try_create_in(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    return {};
  }
  const int err = errno;
  if (err != EOPNOTSUPP && err != EISDIR && err != ENOENT) return errno_message(err);
  if (err == ENOENT) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return errno_message(errno);
  }
  // A file system without O_TMPFILE: a named file of a unique name, removed at once.
  std::string path = dir + "/.ddprun-node-check.XXXXXX";
  fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) return errno_message(errno);
  ::close(fd);
  ::unlink(path.c_str());
  return {};
}

DirProbe probe_dir(const std::string& role, const std::string& path, bool needs_room) {
  DirProbe d;
  d.role = role;
  d.path = path;
  d.needs_room = needs_room;
  d.error = try_create_in(path);
  struct statvfs s {};
  if (::statvfs(path.c_str(), &s) == 0) d.free_bytes = available_bytes(s);
  return d;
}

// Runs `look` on a thread of its own, so that its caller can stop waiting for it: where no
// signal ends a call blocked in the kernel (a hung mount, a GPU that fell off the bus), a look
// that does not come back in time is left to finish on its own (its thread holds only what it
// shares with the promise). With no thread to spare, it runs here. A process that exits with
// such a thread still blocked may itself wait in the kernel for the call to end, as anything
// touching that mount or GPU would: the finding has been said by then.
template <class Look>
auto look_aside(Look look) -> std::future<decltype(look())> {
  using Seen = decltype(look());
  auto seen = std::make_shared<std::promise<Seen>>();
  auto future = seen->get_future();
  auto run = [seen, look] {
    try {
      seen->set_value(look());
    } catch (...) {
      seen->set_exception(std::current_exception());
    }
  };
  try {
    std::thread(run).detach();
  } catch (const std::system_error&) {
    run();
  }
  return future;
}

// Each directory looked at aside, all waited for until `timeout`; one that does not answer is
// reported so.
std::vector<DirProbe> probe_dirs(const std::vector<DirProbe>& wanted,
                                 std::chrono::milliseconds timeout) {
  std::vector<std::future<DirProbe>> looks;
  for (const auto& w : wanted) {
    looks.push_back(look_aside([w] { return probe_dir(w.role, w.path, w.needs_room); }));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<DirProbe> out;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    if (looks[i].wait_until(deadline) == std::future_status::ready) {
      out.push_back(looks[i].get());
    } else {
      out.push_back(wanted[i]);
      out.back().timed_out = true;
      out.back().error = fmt::format("did not answer within {}", format_duration(timeout));
    }
  }
  return out;
}

// A limit under its floor, or under half the job's median (unlimited counts as the largest)
// while also under `enough`.
void judge_limit(const std::vector<NodeProbe>& nodes, const char* name,
                 std::uint64_t NodeProbe::*field, std::uint64_t floor, std::uint64_t enough,
                 bool bytes, std::vector<Finding>& out) {
  if (nodes.empty()) return;  // no report at all: a latecomer whose first round left none
  std::vector<std::uint64_t> values;
  for (const auto& n : nodes) values.push_back(n.*field);
  const std::uint64_t job_median = upper_median(std::move(values));
  for (const auto& n : nodes) {
    const std::uint64_t v = n.*field;
    if (v == kUnlimited) continue;
    if (v < floor) {
      out.push_back({n.node, n.host,
                     fmt::format("ulimit {} is {} (at least {} needed)", name,
                                 format_limit(v, bytes), format_limit(floor, bytes))});
    } else if (nodes.size() > 1 && v < enough &&
               (job_median == kUnlimited ||
                static_cast<double>(v) < kLimitFractionOfMedian * static_cast<double>(job_median))) {
      out.push_back({n.node, n.host,
                     fmt::format("ulimit {} is {}, the job's median {}", name,
                                 format_limit(v, bytes), format_limit(job_median, bytes))});
    }
  }
}

}  // namespace

std::string format_limit(std::uint64_t value, bool bytes) {
  if (value == kUnlimited) return "unlimited";
  return bytes ? format_bytes(value) : std::to_string(value);
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes == kUnlimited) return "unlimited";
  const double b = static_cast<double>(bytes);
  // One decimal, none when it is 0: "1.5 GiB", "64 MiB", "1000 MiB".
  const auto in = [b](double unit, const char* name) {
    std::string number = fmt::format("{:.1f}", b / unit);
    if (number.ends_with(".0")) number.resize(number.size() - 2);
    return number + " " + name;
  };
  if (bytes >= (std::uint64_t{1} << 30)) return in(double(std::uint64_t{1} << 30), "GiB");
  if (bytes >= (std::uint64_t{1} << 20)) return in(double(std::uint64_t{1} << 20), "MiB");
  if (bytes >= 1024) return in(1024.0, "KiB");
  return fmt::format("{} bytes", bytes);
}

NodeProbe probe_node(const ProbeInputs& in) {
  const auto start = std::chrono::steady_clock::now();
  NodeProbe p;
  p.node = in.node;
  p.host = in.host;
  p.workers = in.workers;
  auto gpus = look_aside([visible = in.cuda_visible_devices, workers = in.workers] {
    return survey_gpus(visible, workers);
  });
  const auto gpus_deadline = start + in.gpu_timeout;
  std::vector<DirProbe> dirs;
  if (!in.log_dir.empty()) {
    dirs.push_back({kLogDirectory, in.log_dir, "", 0, !in.log_dir_is_scratch});
  }
  if (!in.program_dir.empty() && in.program_dir != in.log_dir) {
    dirs.push_back({kProgramDirectory, in.program_dir, "", 0, true});
  }
  p.dirs = probe_dirs(dirs, in.dir_timeout);
  struct statvfs s {};
  if (!in.shm_dir.empty() && ::statvfs(in.shm_dir.c_str(), &s) == 0) {
    p.has_shm = true;
    p.shm_size_bytes = static_cast<std::uint64_t>(s.f_blocks) * static_cast<std::uint64_t>(s.f_frsize);
    p.shm_free_bytes = available_bytes(s);
  }
  // The agent raises its own open-files limit; its workers get back the one it started with.
  const rlimit* inherited = inherited_open_files_limit();
  p.open_files = inherited == nullptr ? soft_limit(RLIMIT_NOFILE) : soft_of(*inherited);
  p.locked_bytes = soft_limit(RLIMIT_MEMLOCK);
  p.processes = soft_limit(RLIMIT_NPROC);
  if (gpus.wait_until(gpus_deadline) == std::future_status::ready) {
    p.gpus = gpus.get();
  } else {
    p.gpus.skipped.clear();
    p.gpus.timed_out = true;
    p.gpus.error = fmt::format("NVML did not answer within {}", format_duration(in.gpu_timeout));
  }
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return p;
}

nlohmann::json to_json(const std::vector<Finding>& findings) {
  auto out = nlohmann::json::array();
  for (const auto& f : findings) {
    out.push_back({{"node", f.node}, {"host", f.host}, {"what", f.what}});
  }
  return out;
}

nlohmann::json to_json(const NodeProbe& p) {
  auto dirs = nlohmann::json::array();
  for (const auto& d : p.dirs) {
    dirs.push_back({{"role", d.role},
                    {"path", d.path},
                    {"error", d.error},
                    {"free_bytes", d.free_bytes},
                    {"needs_room", d.needs_room},
                    {"timed_out", d.timed_out}});
  }
  return {{"node", p.node},
          {"host", p.host},
          {"dirs", std::move(dirs)},
          {"has_shm", p.has_shm},
          {"shm_size_bytes", p.shm_size_bytes},
          {"shm_free_bytes", p.shm_free_bytes},
          {"open_files", p.open_files},
          {"locked_bytes", p.locked_bytes},
          {"processes", p.processes},
          {"workers", p.workers},
          {"gpus", to_json(p.gpus)},
          {"link_port", p.link_port},
          {"serves_store", p.serves_store},
          {"min_nodes", p.min_nodes},
          {"seconds", p.seconds}};
}

NodeProbe probe_from_json(const nlohmann::json& j) {
  try {
    NodeProbe p;
    p.node = j.at("node").get<int>();
    p.host = j.at("host").get<std::string>();
    for (const auto& d : j.at("dirs")) {
      p.dirs.push_back({d.at("role").get<std::string>(), d.at("path").get<std::string>(),
                        d.at("error").get<std::string>(), d.at("free_bytes").get<std::uint64_t>(),
                        d.at("needs_room").get<bool>(), d.at("timed_out").get<bool>()});
    }
    p.has_shm = j.at("has_shm").get<bool>();
    p.shm_size_bytes = j.at("shm_size_bytes").get<std::uint64_t>();
    p.shm_free_bytes = j.at("shm_free_bytes").get<std::uint64_t>();
    p.open_files = j.at("open_files").get<std::uint64_t>();
    p.locked_bytes = j.at("locked_bytes").get<std::uint64_t>();
    p.processes = j.at("processes").get<std::uint64_t>();
    p.workers = j.at("workers").get<int>();
    p.gpus = gpu_survey_from_json(j.at("gpus"));
    p.link_port = j.at("link_port").get<std::uint16_t>();
    p.serves_store = j.at("serves_store").get<bool>();
    p.min_nodes = j.at("min_nodes").get<int>();
    p.seconds = j.at("seconds").get<double>();
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(fmt::format("a node's check report is not what this ddprun writes "
                                    "(another version?): {}", e.what()));
  }
}

std::string Finding::line() const {
  return fmt::format("node {} ({}): {}", node, host.empty() ? "?" : host, what);
}

std::vector<Finding> judge(const std::vector<NodeProbe>& nodes) {
  bool a_program_dir_is_writable = false;
  for (const auto& n : nodes) {
    for (const auto& d : n.dirs) {
      if (d.role == kProgramDirectory && d.error.empty()) a_program_dir_is_writable = true;
    }
  }
  std::vector<Finding> out;
  for (const auto& n : nodes) {
    for (const auto& d : n.dirs) {
      const bool expected_writable = d.role != kProgramDirectory || a_program_dir_is_writable;
      if (d.timed_out) {
        // Read-only or not, a directory that does not answer stalls whoever touches it.
        out.push_back({n.node, n.host,
                       fmt::format("{} {} {} (a hung network mount?)", d.role, d.path,
                                   d.error)});
        continue;
      }
      if (!d.error.empty() && !expected_writable) continue;
      if (!d.error.empty()) {
        out.push_back({n.node, n.host,
                       fmt::format("{} {} is not writable: {}", d.role, d.path, d.error)});
      } else if (d.needs_room && d.free_bytes < kMinFreeBytes) {
        out.push_back({n.node, n.host,
                       fmt::format("{} {} has {} free (at least {} needed)", d.role, d.path,
                                   format_bytes(d.free_bytes), format_bytes(kMinFreeBytes))});
      }
    }
    if (n.has_shm && n.shm_free_bytes < kMinShmFreeBytes) {
      out.push_back({n.node, n.host,
                     fmt::format("/dev/shm has {} free of {} (at least {} needed: NCCL and "
                                 "DataLoader workers use it)",
                                 format_bytes(n.shm_free_bytes), format_bytes(n.shm_size_bytes),
                                 format_bytes(kMinShmFreeBytes))});
    }
    for (auto& what : gpu_troubles(n.gpus, n.workers)) out.push_back({n.node, n.host, what});
  }
  judge_limit(nodes, "-n", &NodeProbe::open_files, kMinOpenFiles, kEnoughOpenFiles, false, out);
  judge_limit(nodes, "-l", &NodeProbe::locked_bytes, 0, kUnlimited, true, out);
  judge_limit(nodes, "-u", &NodeProbe::processes, kMinProcesses, kEnoughProcesses, false, out);
  order_by_node(out);
  return out;
}

LateVerdict judge_late(std::vector<NodeProbe> first_round, const NodeProbe& mine) {
  std::vector<int> named;
  for (const auto& f : judge(first_round)) {
    if (f.link_to < 0) named.push_back(f.node);
  }
  std::erase_if(first_round, [&](const NodeProbe& p) {
    return std::find(named.begin(), named.end(), p.node) != named.end();
  });
  LateVerdict out;
  out.compared_with = first_round.size();
  first_round.push_back(mine);
  for (auto& f : judge(first_round)) {
    if (f.node == mine.node) out.findings.push_back(std::move(f));
  }
  return out;
}

Exclusion plan_exclusion(const std::vector<Finding>& findings,
                         const std::vector<NodeProbe>& nodes) {
  Exclusion out;
  for (const auto& f : findings) {
    if (f.link_to < 0) out.nodes.push_back(f.node);
  }
  std::sort(out.nodes.begin(), out.nodes.end());
  out.nodes.erase(std::unique(out.nodes.begin(), out.nodes.end()), out.nodes.end());
  for (int node : out.nodes) {
    const auto it = std::find_if(nodes.begin(), nodes.end(),
                                 [&](const NodeProbe& p) { return p.node == node; });
    if (it != nodes.end() && it->serves_store) {
      out.refused = fmt::format("node {} ({}) serves the rendezvous store, which the job cannot "
                                "go on without",
                                node, it->host);
      return out;
    }
  }
  int min_nodes = 1;
  for (const auto& n : nodes) min_nodes = std::max(min_nodes, n.min_nodes);
  const int left = static_cast<int>(nodes.size() - out.nodes.size());
  if (!out.nodes.empty() && left < min_nodes) {
    out.refused = fmt::format("without {} node(s) the job would have {}, under --nnodes' "
                              "minimum of {}",
                              out.nodes.size(), left, min_nodes);
  }
  return out;
}

std::string gpus_summary(const std::vector<NodeProbe>& nodes) {
  bool any = false;
  std::size_t gpus = 0;
  for (const auto& n : nodes) {
    if (!n.gpus.skipped.empty()) continue;
    any = true;
    gpus += static_cast<std::size_t>(n.gpus.visible);
  }
  return any ? fmt::format("; {} GPU(s)", gpus) : std::string();
}

void order_by_node(std::vector<Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(),
                   [](const Finding& a, const Finding& b) { return a.node < b.node; });
}

namespace {

// The keys of `nodes` nodes' reports in an exchange: their node numbers.
std::vector<std::string> report_keys(int nodes) {
  std::vector<std::string> keys;
  for (int n = 0; n < nodes; ++n) keys.push_back(std::to_string(n));
  return keys;
}

NodeProbe probe_from_report(const std::string& value) {
  const auto j = nlohmann::json::parse(value, nullptr, false);
  if (j.is_discarded()) throw ProtocolError("a node's check report is not JSON");
  return probe_from_json(j);
}

}  // namespace

std::vector<std::string> exchange_reports(store::Store& store, const std::string& prefix, int me,
                                          const std::string& mine, int nodes,
                                          const std::string& report, Deadline deadline) {
  store::PrefixStore exchange(prefix, store);
  exchange.set(std::to_string(me), mine, deadline);
  try {
    return exchange.multi_get(report_keys(nodes), deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format("--node-check: not every node of {} reported {}: {}", nodes,
                                   report, e.what()));
  }
}

std::vector<NodeProbe> read_probes(store::Store& store, const std::string& prefix, int nodes,
                                   Deadline wait, std::chrono::milliseconds read_timeout) {
  store::PrefixStore reports(prefix + "/node_check", store);
  const auto keys = report_keys(nodes);
  std::vector<std::optional<std::string>> values;
  try {
    reports.wait(keys, wait);
    for (auto& v : reports.multi_get(keys, Deadline::after(read_timeout))) values.emplace_back(v);
  } catch (const TimeoutError&) {
    // Those there, one by one: a report is never taken back, so none goes missing meanwhile.
    values.clear();
    for (const auto& key : keys) {
      values.push_back(reports.try_get(key, Deadline::after(read_timeout)));
    }
  }
  std::vector<NodeProbe> all;
  for (const auto& value : values) {
    if (value) all.push_back(probe_from_report(*value));
  }
  return all;
}

std::vector<NodeProbe> exchange_probes(store::Store& store, const std::string& prefix,
                                       const NodeProbe& mine, int nodes, Deadline deadline) {
  std::vector<NodeProbe> all;
  for (const auto& value : exchange_reports(store, prefix + "/node_check", mine.node,
                                            to_json(mine).dump(), nodes, "its check", deadline)) {
    all.push_back(probe_from_report(value));
  }
  return all;
}

}  // namespace ddprun
