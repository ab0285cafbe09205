#include "agent/failure.hpp"

#include <cmath>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/exit_codes.hpp"

namespace ddprun {

using nlohmann::json;

std::optional<ErrorFile> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    auto j = json::parse(in);
    const auto& m = j.at("message");
    ErrorFile out;
    if (m.is_string()) {
      out.message = m.get<std::string>();
      return out;
    }
    out.message = m.value("message", "");
    if (m.contains("extraInfo")) {
      const auto& extra = m["extraInfo"];
      out.traceback = extra.value("py_callstack", "");
      if (extra.contains("timestamp")) {
        const auto& ts = extra["timestamp"];
        // torchrun writes whole seconds as a string; ddp_resnet adds milliseconds.
        out.timestamp = ts.is_string() ? std::strtod(ts.get<std::string>().c_str(), nullptr)
                                       : ts.get<double>();
      }
    }
    return out;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

Failure worker_failure(const WorkerExit& exit, const std::string& error_file,
                       const std::string& host, int node, int attempt) {
  Failure f;
  f.kind = Failure::Kind::kWorker;
  f.host = host;
  f.node = node;
  f.rank = exit.rank;
  f.local_rank = exit.local_rank;
  f.pid = exit.pid;
  f.exit_code = exit.shell_code();
  f.signal = exit.signal;
  f.out_of_memory = exit.out_of_memory;
  f.attempt = attempt;
  f.unix_time = unix_seconds() - std::chrono::duration<double>(Clock::now() - exit.when).count();
  f.stderr_tail = exit.stderr_tail;
  if (auto file = error_file.empty() ? std::nullopt : read_error_file(error_file)) {
    f.message = file->message;
    f.traceback = file->traceback;
    // torch's stamp is whole seconds, rounded down: the failure happened somewhere in the
    // second after it. Only the end of that second is sure, so a peer that failed a moment
    // after the real first failure (within the same second) does not appear to precede it.
    // A stamp from the future (clock skew) is ignored.
    const bool whole = file->timestamp == std::floor(file->timestamp);
    const double latest = whole ? file->timestamp + 1.0 : file->timestamp;
    if (file->timestamp > 0 && latest < f.unix_time) f.unix_time = latest;
  }
  return f;
}

std::string format_root_cause(const Failure& f, int world_size, const std::string& log_dir) {
  std::string out = "Root cause (first failure in the job):\n";
  auto row = [&](const char* key, const std::string& value) {
    out += fmt::format("  {:<11} {}\n", key, value);
  };
  auto when = static_cast<std::time_t>(f.unix_time);
  char stamp[64] = "";
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", std::localtime(&when));
  const auto rank_rows = [&] {
    row("host", f.host);
    row("node", std::to_string(f.node));
    row("rank", world_size > 0
                    ? fmt::format("{} of {} (local rank {})", f.rank, world_size, f.local_rank)
                    : fmt::format("{} (local rank {})", f.rank, f.local_rank));
  };
  switch (f.kind) {
    case Failure::Kind::kWorker:
      rank_rows();
      row("pid", std::to_string(f.pid));
      row("exit", f.signal ? fmt::format("{} (exit code {})", killed_by(f.signal, f.out_of_memory),
                                         f.exit_code)
                           : fmt::format("exit code {}", f.exit_code));
      break;
    case Failure::Kind::kSignal:
      row("host", f.host);
      row("node", std::to_string(f.node));
      row("cause", fmt::format("the agent received {}", signal_name(f.signal)));
      break;
    case Failure::Kind::kAgent:
    case Failure::Kind::kMembership:
      row("host", f.host);
      row("node", std::to_string(f.node));
      row("cause", f.message);
      break;
    case Failure::Kind::kHang:
      if (f.rank >= 0) rank_rows();
      row("hang", f.message);
      break;
  }
  row("attempt", std::to_string(f.attempt));
  row("time", stamp);
  // The failed rank's files are under attempt_<n>/<local rank>/ of its own node's directory.
  if (!log_dir.empty()) row("logs", log_dir + " (this node's log directory)");
  if (!f.where.empty()) {
    out += "  where the ranks were:\n";
    for (const auto& line : f.where) out += "    " + line + "\n";
    if (!f.stacks.empty()) out += "  full stacks: " + f.stacks + "\n";
  }
  if (f.kind == Failure::Kind::kWorker) {
    if (!f.message.empty()) row("error", f.message);
    if (!f.traceback.empty()) {
      out += "  traceback:\n";
      for (std::size_t start = 0; start < f.traceback.size();) {
        auto nl = f.traceback.find('\n', start);
        if (nl == std::string::npos) nl = f.traceback.size();
        out += "    " + f.traceback.substr(start, nl - start) + "\n";
        start = nl + 1;
      }
    } else if (!f.stderr_tail.empty()) {
      out += "  last stderr lines:\n";
      for (const auto& line : f.stderr_tail) out += "    " + line + "\n";
    } else if (f.message.empty()) {
      out += "  (no error file and no stderr output; decorate the entry point with "
             "torch.distributed.elastic.multiprocessing.errors.record for a traceback)\n";
    }
  }
  return out;
}

bool restartable(const Failure& root) {
  return root.kind == Failure::Kind::kWorker || root.kind == Failure::Kind::kHang ||
         (root.kind == Failure::Kind::kAgent && root.exit_code == kExitNoResources);
}

bool restarts_after(const Failure& root, int restarts, int max_restarts, int signal) {
  return restartable(root) && restarts < max_restarts && signal == 0;
}

}  // namespace ddprun
