#include "monitor/status_server.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;

namespace {

std::string runtime_control_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  return runtime != nullptr && *runtime != '\0' ? std::string(runtime) + "/ddprun" : "";
}

std::string tmp_control_dir() { return fmt::format("/tmp/ddprun-{}", geteuid()); }

// Why `dir` is not a directory only this user can enter; empty when it is one.
std::string why_not_private(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return errno_message(errno);
  // Anyone who could write here could put a socket of theirs where `ddprun status` looks.
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return fmt::format("not a directory that only user {} can enter (mode {:o}, owner {})",
                       geteuid(), st.st_mode & 07777, st.st_uid);
  }
  return "";
}

}  // namespace

std::string control_dir() {
  auto dir = runtime_control_dir();
  if (dir.empty()) dir = tmp_control_dir();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw Error(fmt::format("control directory {}: cannot make it: {}", dir, errno_message(errno)));
  }
  if (const auto why = why_not_private(dir); !why.empty()) {
    throw Error(fmt::format("control directory {}: {}: no control socket", dir, why));
  }
  return dir;
}

std::vector<std::string> control_dirs_to_scan(const std::string& user_runtime_root) {
  // An agent started in a login session has the session's XDG_RUNTIME_DIR, systemd's
  // <root>/<uid>, where a `ddprun status` run by cron, su or sudo may have none.
  const auto login_session = fmt::format("{}/{}/ddprun", user_runtime_root, geteuid());
  std::vector<std::string> dirs;
  std::vector<std::filesystem::path> seen;  // one directory under two names is asked once
  for (const auto& dir : {runtime_control_dir(), login_session, tmp_control_dir()}) {
    if (dir.empty() || !why_not_private(dir).empty()) continue;
    std::error_code ec;
    auto real = std::filesystem::canonical(dir, ec);
    if (ec || std::find(seen.begin(), seen.end(), real) != seen.end()) continue;
    seen.push_back(std::move(real));
    dirs.push_back(dir);
  }
  return dirs;
}

std::string control_socket_path() { return fmt::format("{}/{}.sock", control_dir(), getpid()); }

class StatusServer::Impl {
 public:
  Impl(StatusServerOptions options, StatusHandlers handlers)
      : options_(std::move(options)), handlers_(std::move(handlers)) {
    if (options_.metrics_port >= 0) {
      boost::system::error_code ec;
      const auto address = asio::ip::make_address(options_.metrics_addr, ec);
      if (ec) {
        throw ConnectionError(fmt::format("--metrics-addr {}: not an IP address",
                                          options_.metrics_addr));
      }
      metrics_.emplace(io_);
      const tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.metrics_port));
      metrics_->open(endpoint.protocol(), ec);
      if (!ec) metrics_->set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) metrics_->bind(endpoint, ec);
      if (!ec) metrics_->listen(asio::socket_base::max_listen_connections, ec);
      if (ec) {
        throw ConnectionError(fmt::format(
            "metrics: cannot listen on {}: {}",
            format_host_port(options_.metrics_addr, static_cast<std::uint16_t>(options_.metrics_port)),
            ec.message()));
      }
      bound_port_ = metrics_->local_endpoint().port();
    }
    // The metrics port first: it may refuse the start; the control socket may only warn.
    if (!options_.control_path.empty()) listen_control();
    if (control_) accept(*control_, true);
    if (metrics_) accept(*metrics_, false);
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    asio::post(io_, [this] {
      if (control_) control_->close();
      if (metrics_) metrics_->close();
    });
    io_.stop();
    if (thread_.joinable()) thread_.join();
    if (pool_) pool_->join();
    if (!options_.control_path.empty()) ::unlink(options_.control_path.c_str());
  }

  int metrics_port() const { return bound_port_; }

  asio::thread_pool& pool() {
    if (!pool_) pool_.emplace(2);
    return *pool_;
  }

  void listen_control() {
    // The socket is bound and listening under a name no reader scans, then renamed into
    // place: a reader that finds "<pid>.sock" never meets one that refuses connections.
    const auto& path = options_.control_path;
    const auto binding = path + ".binding";
    boost::system::error_code ec;
    try {
      ::unlink(binding.c_str());  // our own pid's: left by a dead process with this pid
      control_.emplace(io_);
      control_->open(unix_socket(), ec);
      if (!ec) control_->bind(unix_socket::endpoint(binding), ec);
      if (!ec && ::chmod(binding.c_str(), 0600) != 0) {
        ec.assign(errno, boost::system::system_category());
      }
      if (!ec) control_->listen(asio::socket_base::max_listen_connections, ec);
      if (!ec && ::rename(binding.c_str(), path.c_str()) != 0) {
        ec.assign(errno, boost::system::system_category());
      }
    } catch (const std::exception& e) {  // a path too long for a socket's address
      ec = asio::error::name_too_long;
    }
    if (ec) {
      // The job runs as well without it: only `ddprun status` on this machine misses it.
      spdlog::warn("status: control socket {}: cannot listen: {}; `ddprun status` on this "
                   "machine will not find this job", path, ec.message());
      control_.reset();
      ::unlink(binding.c_str());
      options_.control_path.clear();
      return;
    }
  }
  const std::string& control_path() const { return options_.control_path; }

 private:
  template <typename Protocol>
  class Session : public std::enable_shared_from_this<Session<Protocol>> {
   public:
    Session(typename Protocol::socket socket, Impl& server, bool control)
        : stream_(std::move(socket)), server_(server), control_(control) {}

    void start() {
      parser_.header_limit(8 * 1024);
      parser_.body_limit(0);
      stream_.expires_after(server_.options_.request_timeout);
      http::async_read(stream_, buffer_, parser_,
                       [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                         self->on_request(ec);
                       });
    }

    ~Session() { --server_.open_[control_ ? 1 : 0]; }

   private:
    void on_request(beast::error_code ec) {
      if (ec) return;  // timed out, malformed or closed: the connection just ends
      const auto& req = parser_.get();
      auto target = std::string(req.target());
      target = target.substr(0, target.find('?'));  // Prometheus may add parameters
      if (req.method() != http::verb::get) return respond(http::status::method_not_allowed, "text/plain", "GET only\n");
      std::function<std::string()> handler;
      const char* type = "application/json";
      if (target == "/metrics") {
        handler = server_.handlers_.metrics;
        type = "text/plain; version=0.0.4; charset=utf-8";
      } else if (control_ && target == "/status") {
        handler = server_.handlers_.status;
      } else if (control_ && target == "/stacks") {
        handler = server_.handlers_.stacks;
      }
      if (!handler) return respond(http::status::not_found, "text/plain", "not found\n");
      // Answers may read the store or /proc, or take stacks: never on the I/O thread.
      asio::post(server_.pool(), [self = this->shared_from_this(), handler, type] {
        std::string body;
        auto status = http::status::ok;
        try {
          body = handler();
        } catch (const std::exception& e) {
          status = http::status::internal_server_error;
          body = json_error(e.what());
        }
        asio::post(self->stream_.get_executor(), [self, status, type, body = std::move(body)]() mutable {
          self->respond(status, type, std::move(body));
        });
      });
    }

    static std::string json_error(const std::string& what) {
      std::string escaped;
      for (char c : what) {
        if (c == '"' || c == '\\') escaped += '\\';
        escaped += c == '\n' ? ' ' : c;
      }
      return "{\"error\": \"" + escaped + "\"}\n";
    }

    void respond(http::status status, const char* type, std::string body) {
      res_.result(status);
      res_.version(11);
      res_.set(http::field::content_type, type);
      res_.set(http::field::connection, "close");
      res_.body() = std::move(body);
      res_.prepare_payload();
      stream_.expires_after(server_.options_.request_timeout);
      http::async_write(stream_, res_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
        if (ec) return;
        beast::error_code ignored;
        self->stream_.socket().shutdown(asio::socket_base::shutdown_send, ignored);
        self->drain();
      });
    }

    // Reads what the client still sends until it closes (within the timeout): closing with
    // unread bytes would reset the connection and could cut the answer short.
    void drain() {
      stream_.async_read_some(asio::buffer(scratch_),
                              [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                                if (!ec) self->drain();
                              });
    }

    beast::basic_stream<Protocol> stream_;
    std::array<char, 512> scratch_{};
    Impl& server_;
    bool control_;
    beast::flat_buffer buffer_{8 * 1024};
    http::request_parser<http::empty_body> parser_;
    http::response<http::string_body> res_;
  };

  template <typename Acceptor>
  void accept(Acceptor& acceptor, bool control) {
    using Protocol = typename Acceptor::protocol_type;
    acceptor.async_accept([this, &acceptor, control](beast::error_code ec,
                                                     typename Protocol::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors (EMFILE), say: the connection still waits, so an accept at once
        // would fail again at once, in a loop. The next one comes a moment later.
        if (!accept_failed_[control ? 1 : 0].exchange(true)) {
          spdlog::warn("{}: cannot accept a connection ({}); trying again every 100ms",
                       control ? "status socket" : "metrics port", ec.message());
        }
        auto retry = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
        retry->async_wait([this, &acceptor, control, retry](beast::error_code timer_ec) {
          if (!timer_ec && acceptor.is_open()) accept(acceptor, control);
        });
        return;
      }
      accept_failed_[control ? 1 : 0] = false;
      // Each listener has its own limit: clients of the metrics port, which may be reachable
      // from other hosts, can never crowd out the user's own `ddprun status`.
      auto& open = open_[control ? 1 : 0];
      if (open >= options_.max_connections) {
        socket.close();  // at the limit: the newcomer is the one turned away
      } else {
        ++open;
        std::make_shared<Session<Protocol>>(std::move(socket), *this, control)->start();
      }
      accept(acceptor, control);
    });
  }

  StatusServerOptions options_;
  StatusHandlers handlers_;
  // Sessions alive, of the metrics port [0] and of the control socket [1]; they outlive io_,
  // whose end frees the last sessions.
  std::array<std::atomic<std::size_t>, 2> open_{};
  // Whether each listener's accept is failing, said once a spell: it fails every 100 ms then.
  std::array<std::atomic<bool>, 2> accept_failed_{};
  asio::io_context io_;
  // Made on the first request (on the I/O thread, the only one that posts to it): a job nobody
  // watches never starts its threads.
  std::optional<asio::thread_pool> pool_;
  std::optional<unix_socket::acceptor> control_;
  std::optional<tcp::acceptor> metrics_;
  int bound_port_ = -1;
  std::thread thread_;
};

StatusServer::StatusServer(StatusServerOptions options, StatusHandlers handlers)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handlers))) {}
StatusServer::~StatusServer() = default;
int StatusServer::metrics_port() const { return impl_->metrics_port(); }
const std::string& StatusServer::control_path() const { return impl_->control_path(); }

}  // namespace ddprun
