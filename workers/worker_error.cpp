#include "workers/worker_error.hpp"

#include <unistd.h>

#include <c10/util/Exception.h>
#include <fmt/format.h>

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
