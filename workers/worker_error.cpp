#include "workers/worker_error.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/failure_record.hpp"

namespace ddprun::workers {
namespace {

std::string g_host;
int g_rank = -1;

std::string base_name(const char* path) {
  std::string_view p(path);
  auto slash = p.rfind('/');
  return std::string(slash == std::string_view::npos ? p : p.substr(slash + 1));
}

}  // namespace

WorkerError::WorkerError(const std::string& what) : Error(what), unix_time_(unix_seconds()) {}

void write_error_file(const std::string& type, const std::string& message, double unix_time) {
  static std::atomic<bool> written{false};
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path || written.exchange(true)) return;
  nlohmann::json j = {
      {"message",
       {{"message", type + ": " + message},
        {"extraInfo", {{"py_callstack", ""}, {"timestamp", fmt::format("{:.3f}", unix_time)}}}}}};
  // Written aside and renamed, so a reader never sees half a file.
  const std::string tmp = std::string(path) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
}

void set_error_context(std::string host, int rank) {
  g_host = std::move(host);
  g_rank = rank;
}

std::string error_context() {
  std::string host = g_host;
  if (host.empty()) {
    char name[256] = "";
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return g_rank < 0 ? fmt::format("host {}, rank ?", host)
                    : fmt::format("host {}, rank {}", host, g_rank);
}

std::string describe(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    std::string text = c10_error->what_without_backtrace();
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }
  return e.what();
}

void throw_worker_error(std::string_view what, std::string_view cause,
                        const std::source_location& where) {
  throw WorkerError(fmt::format("{} failed on {} ({}:{}): {}", what, error_context(),
                                base_name(where.file_name()), where.line(), cause));
}

}  // namespace ddprun::workers
