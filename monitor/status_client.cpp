#include "monitor/status_client.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <future>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "common/error.hpp"
#include "monitor/status_server.hpp"

namespace ddprun {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using unix_socket = asio::local::stream_protocol;

std::string control_get(const std::string& path, const std::string& target, Deadline deadline) {
  asio::io_context io;
  beast::basic_stream<unix_socket> stream(io);
  beast::error_code failure;
  const char* step = "connecting";
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, "localhost");
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  const auto budget = deadline.remaining();
  stream.expires_after(budget);
  stream.async_connect(unix_socket::endpoint(path), [&](beast::error_code ec) {
    if (ec) {
      failure = ec;
      return;
    }
    step = "sending the request";
    http::async_write(stream, req, [&](beast::error_code wrote, std::size_t) {
      if (wrote) {
        failure = wrote;
        return;
      }
      step = "reading the answer";
      http::async_read(stream, buffer, parser, [&](beast::error_code read, std::size_t) {
        failure = read;
      });
    });
  });
  io.run();
  if (failure == beast::error::timeout) {
    throw TimeoutError(fmt::format("control socket {}: no answer to {} within {}", path, target,
                                   format_duration(budget)));
  }
  if (failure) {
    const auto what =
        fmt::format("control socket {}: {} failed: {}", path, step, failure.message());
    if (std::string_view(step) != "connecting") throw Error(what);
    if (failure == asio::error::connection_refused ||
        failure == beast::errc::no_such_file_or_directory) {
      throw NobodyListensError(what);
    }
    throw ConnectionError(what);
  }
  auto res = parser.release();
  if (res.result() != http::status::ok) {
    std::string why = res.body();
    try {
      why = nlohmann::json::parse(res.body()).at("error").get<std::string>();
    } catch (const std::exception&) {
    }
    throw Error(fmt::format("control socket {}: {} answered {}: {}", path, target,
                            res.result_int(), why));
  }
  return std::move(res.body());
}

bool LocalProcess::is_agent() const {
  return std::any_of(nodes.begin(), nodes.end(),
                     [this](const NodeStatus& n) { return n.agent_pid == pid; });
}

namespace {

// The pid in "<dir>/<pid>.sock"; 0 when the name is not one.
int socket_pid(const std::string& path) {
  const auto stem = fs::path(path).stem().string();
  if (stem.empty() || !std::all_of(stem.begin(), stem.end(), ::isdigit) || stem.size() > 9) return 0;
  return std::stoi(stem);
}

}  // namespace

LocalScan scan_local(Deadline deadline) {
  LocalScan scan;
  std::vector<std::string> sockets;
  for (const auto& dir : control_dirs_to_scan()) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".sock") sockets.push_back(entry.path().string());
    }
  }
  std::sort(sockets.begin(), sockets.end());
  std::vector<std::future<std::string>> answers;
  for (const auto& path : sockets) {
    answers.push_back(std::async(std::launch::async, [path, deadline] {
      return control_get(path, "/status", deadline);
    }));
  }
  for (std::size_t i = 0; i < sockets.size(); ++i) {
    try {
      const auto body = nlohmann::json::parse(answers[i].get());
      LocalProcess p;
      p.socket = sockets[i];
      p.pid = socket_pid(sockets[i]);
      for (const auto& node : body.at("nodes")) p.nodes.push_back(NodeStatus::from_json(node));
      scan.processes.push_back(std::move(p));
    } catch (const NobodyListensError&) {
      // An agent's socket takes its name only once it listens (it is bound under another and
      // renamed), so one that refuses was left by a process killed before it could remove it,
      // whatever process has its pid now (pids are reused). It is ours to remove.
      ::unlink(sockets[i].c_str());
    } catch (const std::exception& e) {
      scan.unanswered.push_back(fmt::format("{}: {}", sockets[i], e.what()));
    }
  }
  return scan;
}

}  // namespace ddprun
