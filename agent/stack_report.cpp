#include "agent/stack_report.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

std::string basename_of(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// A frame of an installed library or the interpreter's own modules, not the user's program.
bool library_file(const std::string& file) {
  return file.find("/dist-packages/") != std::string::npos ||
         file.find("/site-packages/") != std::string::npos ||
         starts_with(file, "/usr/lib/python") || starts_with(file, "/usr/local/lib/python") ||
         starts_with(file, "<frozen");
}

// torch.distributed's collective and point-to-point operations, as Python functions of
// distributed_c10d.py (the blocking call the user's code made).
const std::set<std::string>& collective_functions() {
  static const std::set<std::string> names = {
      "all_reduce",     "all_reduce_coalesced", "all_gather",         "all_gather_object",
      "all_gather_into_tensor", "_all_gather_base", "all_gather_coalesced", "all_to_all",
      "all_to_all_single", "barrier",           "monitored_barrier", "broadcast",
      "broadcast_object_list", "gather",        "gather_object",     "reduce",
      "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "scatter",
      "scatter_object_list", "send",            "recv",              "isend",
      "irecv",          "batch_isend_irecv",    "wait"};
  return names;
}

bool native_collective(const std::string& function) {
  return function.find("c10d::") != std::string::npos ||
         function.find("gloo::") != std::string::npos ||
         function.find("nccl") != std::string::npos || function.find("NCCL") != std::string::npos;
}

// The called name in a line of Python source: "time.sleep" in "time.sleep(1000)", the last
// call's name when several are nested ("dist.all_reduce" in "x = dist.all_reduce(t)").
std::string callee(const std::string& source) {
  const auto paren = source.find('(');
  if (paren == std::string::npos) return "";
  auto start = paren;
  while (start > 0) {
    const char c = source[start - 1];
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_' && c != '.') break;
    --start;
  }
  return source.substr(start, paren - start);
}

// "c10d::Work::wait(std::chrono::duration<...>) () from /lib/libtorch_cpu.so" -> name and file.
StackFrame native_frame(const std::string& line) {
  static const std::regex frame(R"(^#\d+\s+(?:0x[0-9a-f]+ in )?(.*)$)");
  std::smatch m;
  StackFrame f;
  if (!std::regex_match(line, m, frame)) return f;
  std::string rest = m[1];
  if (auto from = rest.rfind(" from "); from != std::string::npos) {
    f.file = rest.substr(from + 6);
  } else if (auto at = rest.rfind(" at "); at != std::string::npos) {
    const auto loc = rest.substr(at + 4);
    const auto colon = loc.rfind(':');
    f.file = colon == std::string::npos ? loc : loc.substr(0, colon);
    if (colon != std::string::npos) f.line = std::atoi(loc.c_str() + colon + 1);
  }
  // gdb separates the argument list with " ("; a C++ name's own parameters follow directly.
  auto name = rest.substr(0, rest.find(" ("));
  if (auto params = name.find('('); params != std::string::npos && params > 0) {
    name = name.substr(0, params);
  }
  f.function = name;
  return f;
}

// The C library's and the runtime's own frames say nothing about where the program is.
bool system_frame(const StackFrame& f) {
  return f.function == "??" || starts_with(f.function, "_") ||
         starts_with(f.file, "./nptl") || starts_with(f.file, "../sysdeps") ||
         f.file.find("/libc.so") != std::string::npos ||
         f.function.find("pthread_cond") != std::string::npos;
}

std::string python_where(const std::vector<StackFrame>& frames, bool& in_collective) {
  std::size_t user = frames.size();
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (!frames[i].builtin && !library_file(frames[i].file)) {
      user = i;
      break;
    }
  }
  for (std::size_t i = 0; i < std::min(user, frames.size()); ++i) {
    const auto& f = frames[i];
    if (f.file.find("torch/distributed/") != std::string::npos &&
        collective_functions().count(f.function) > 0) {
      in_collective = true;
    }
  }
  if (user == frames.size()) {
    const auto& f = frames.front();
    return fmt::format("in {}, {}:{}", f.function, basename_of(f.file), f.line);
  }
  const auto& u = frames[user];
  const auto at = fmt::format("{}:{} {}()", basename_of(u.file), u.line, u.function);
  if (user == 0) {
    // No Python frame inside the user's: it is in C code it called (a built-in, an extension)
    // or running its own line. The call on that line names the former.
    const auto called = callee(u.source);
    return called.empty() ? "in " + at : fmt::format("in {}, {}", called, at);
  }
  const auto& inner = frames[user - 1];
  auto op = inner.function;
  if (inner.builtin) {
    const auto called = callee(u.source);
    op = called.empty() ? inner.function : called;
  }
  return fmt::format("in {}, {}", op, at);
}

std::string native_where(const std::vector<StackFrame>& frames, bool& in_collective) {
  const StackFrame* innermost = nullptr;
  const StackFrame* program = nullptr;  // the innermost frame in the executable itself
  for (const auto& f : frames) {
    if (native_collective(f.function)) in_collective = true;
    if (system_frame(f)) continue;
    if (innermost == nullptr) innermost = &f;
    const bool in_library = f.file.find(".so") != std::string::npos;
    if (program == nullptr && !in_library && f.function != "??") program = &f;
  }
  if (innermost == nullptr) return frames.empty() ? "" : "in " + frames.front().function;
  if (program == nullptr || program == innermost) {
    return innermost->line > 0 ? fmt::format("in {}, {}:{}", innermost->function,
                                             basename_of(innermost->file), innermost->line)
                               : "in " + innermost->function;
  }
  return program->line > 0
             ? fmt::format("in {}, {}:{} {}()", innermost->function, basename_of(program->file),
                           program->line, program->function)
             : fmt::format("in {}, {}()", innermost->function, program->function);
}

}  // namespace

bool mentions_collective(const std::string& text) {
  // Frames and errors of torch.distributed's collectives only: NCCL's own log lines (with
  // NCCL_DEBUG=INFO) say nothing about where a rank failed.
  for (const char* marker : {"distributed_c10d.py", "ProcessGroupGloo", "ProcessGroupNCCL",
                             "gloo/transport"}) {
    if (text.find(marker) != std::string::npos) return true;
  }
  return false;
}

bool mentions_collective_timeout(const std::string& text) {
  // Gloo's (torch 1.13 and 2.x): "[.../unbound_buffer.cc:81] Timed out waiting 8000ms for recv
  // operation to complete"; NCCL's watchdog (2.x): "Watchdog caught collective operation
  // timeout: WorkNCCL(...) ran for 600082 milliseconds before timing out".
  static const std::regex timeout(
      R"(Timed out waiting \d+ ?ms for (recv|send) operation|collective operation timeout)");
  return std::regex_search(text, timeout);
}

ParsedStacks parse_gdb_output(const std::string& text, int pid) {
  static const std::regex py_frame(R"re(^\s*File "(.*)", line (\d+), in (.*)$)re");
  // "Thread 3 (...)", or "Thread 2.3 (...)" when one debugger held several processes.
  static const std::regex thread_header(R"(^Thread (?:\d+\.)?(\d+) \(.*\(LWP (\d+)\).*\):$)");
  ParsedStacks out;
  enum class Section { kNone, kPython, kNative } section = Section::kNone;
  bool main_thread = false;
  bool thread_one = false;
  bool in_python_thread = true;  // py-bt prints one thread, with no header
  int python_threads = 0;
  // gdb numbers the threads in the order it found them, the main thread first: thread 1 stands
  // in when no thread has the process's id (the output came from elsewhere).
  std::vector<StackFrame> first_thread;
  for (const auto& line : split(text, '\n')) {
    // Why there may be no frames, in the debugger's words (ptrace refused, the process gone).
    if (out.complaint.empty() &&
        (line.find("ptrace") != std::string::npos || line.find("attach") != std::string::npos ||
         line.find("No such process") != std::string::npos)) {
      out.complaint = std::string(trim(line));
    }
    if (line.find("--- python ---") != std::string::npos) {
      section = Section::kPython;
      continue;
    }
    if (line.find("--- native ---") != std::string::npos) {
      section = Section::kNative;
      continue;
    }
    std::smatch m;
    if (section == Section::kPython) {
      const auto t = std::string(trim(line));
      if (starts_with(t, "Python thread ")) {
        // Every thread's frames: the main thread's say where the rank is (the first thread's
        // stand in until the main thread comes; it comes last, the oldest thread state).
        const bool main = t.find("(main)") != std::string::npos;
        in_python_thread = main || python_threads == 0;
        if (main) out.python.clear();
        ++python_threads;
        continue;
      }
      if (!in_python_thread) continue;
      if (std::regex_match(line, m, py_frame)) {
        out.python.push_back(StackFrame{m[3], m[1], std::stoi(m[2]), "", false});
      } else if (starts_with(t, "<built-in ")) {
        out.python.push_back(StackFrame{t, "", 0, "", true});
      } else if (!t.empty() && !out.python.empty() && !out.python.back().builtin &&
                 out.python.back().source.empty() && starts_with(line, "    ")) {
        out.python.back().source = t;
      }
    } else if (section == Section::kNative) {
      if (std::regex_match(line, m, thread_header)) {
        thread_one = std::stoi(m[1]) == 1;
        main_thread = std::stoi(m[2]) == pid;
        continue;
      }
      if (!starts_with(line, "#")) continue;
      if (main_thread) out.native.push_back(native_frame(line));
      if (thread_one) first_thread.push_back(native_frame(line));
    }
  }
  if (out.native.empty()) out.native = std::move(first_thread);
  return out;
}

RankWhere locate(const ParsedStacks& stacks) {
  RankWhere r;
  if (!stacks.python.empty()) {
    r.where = python_where(stacks.python, r.in_collective);
    // A Python frame blocked in C++ (a DDP hook, a custom op) can be in a collective too.
    for (const auto& f : stacks.native) r.in_collective = r.in_collective || native_collective(f.function);
  } else if (!stacks.native.empty()) {
    r.where = native_where(stacks.native, r.in_collective);
  }
  if (r.where.empty()) {
    r.note = "no stack: " +
             (stacks.complaint.empty() ? "the debugger printed no frames" : stacks.complaint);
  }
  return r;
}

nlohmann::json where_json(const std::vector<RankWhere>& ranks) {
  auto out = nlohmann::json::array();
  for (const auto& r : ranks) {
    out.push_back({{"rank", r.rank}, {"local_rank", r.local_rank}, {"pid", r.pid},
                   {"host", r.host}, {"node", r.node}, {"where", r.where},
                   {"in_collective", r.in_collective}, {"note", r.note}});
  }
  return out;
}

std::string where_to_json(const std::vector<RankWhere>& ranks) {
  return where_json(ranks).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<RankWhere> where_from_json(const std::string& text) {
  try {
    std::vector<RankWhere> out;
    for (const auto& j : nlohmann::json::parse(text)) {
      RankWhere r;
      r.rank = j.at("rank").get<int>();
      r.local_rank = j.at("local_rank").get<int>();
      r.pid = j.at("pid").get<int>();
      r.host = j.at("host").get<std::string>();
      r.node = j.at("node").get<int>();
      r.where = j.at("where").get<std::string>();
      r.in_collective = j.at("in_collective").get<bool>();
      r.note = j.at("note").get<std::string>();
      out.push_back(std::move(r));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed stack record in the store: {}", e.what()));
  }
}

std::string format_rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j - i >= 2) {
      parts.push_back(fmt::format("{}-{}", ranks[i], ranks[j]));
    } else {
      for (std::size_t k = i; k <= j; ++k) parts.push_back(std::to_string(ranks[k]));
    }
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::vector<std::string> group_ranks(const std::vector<RankWhere>& ranks, int world_size) {
  struct Group {
    std::vector<int> ranks;
    bool located = false;
    bool in_collective = false;
  };
  std::map<std::string, Group> groups;
  bool any_in_collective = false;
  for (const auto& r : ranks) {
    const auto key = r.where.empty() ? r.note : r.where;
    auto& g = groups[key];
    g.ranks.push_back(r.rank);
    g.located = !r.where.empty();
    g.in_collective = r.in_collective;
    any_in_collective = any_in_collective || r.in_collective;
  }
  std::vector<std::pair<std::string, Group>> ordered(groups.begin(), groups.end());
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    if (a.second.ranks.size() != b.second.ranks.size()) {
      return a.second.ranks.size() > b.second.ranks.size();
    }
    return *std::min_element(a.second.ranks.begin(), a.second.ranks.end()) <
           *std::min_element(b.second.ranks.begin(), b.second.ranks.end());
  });
  std::vector<std::string> labels;
  std::size_t width = 0;
  for (const auto& [where, g] : ordered) {
    labels.push_back(fmt::format("{} {} ({} of {}):", g.ranks.size() == 1 ? "rank" : "ranks",
                                 format_rank_list(g.ranks), g.ranks.size(), world_size));
    width = std::max(width, labels.back().size());
  }
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    const auto& [where, g] = ordered[i];
    auto line = fmt::format("{:<{}} {}", labels[i], width, where);
    if (g.located && !g.in_collective && any_in_collective) line += "   <- not in the collective";
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<int> ranks_out_of_step(const std::vector<RankWhere>& ranks) {
  std::vector<int> outside;
  bool any_inside = false;
  for (const auto& r : ranks) {
    if (r.in_collective) {
      any_inside = true;
    } else if (!r.where.empty()) {
      outside.push_back(r.rank);
    }
  }
  if (!any_inside) return {};
  return outside;
}

}  // namespace ddprun
