#include "store/tcp_store_server.hpp"

#include <sys/resource.h>

#include <atomic>
#include <thread>
#include <unordered_set>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "store/memory_store.hpp"
#include "store/store_auth.hpp"
#include "store/store_connection.hpp"

namespace ddprun::store {

namespace asio = boost::asio;
using asio::ip::tcp;

class TcpStoreServer::Impl {
 public:
  explicit Impl(StoreServerOptions options)
      : options_(std::move(options)),
        acceptor_(io_),
        context_{*shared_, options_.limits, options_.read_timeout, options_.secret,
                 options_.served_for, {}, {}} {
    tcp::endpoint endpoint = resolve();
    boost::system::error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && endpoint.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw ConnectionError(fmt::format("store: cannot listen on {}: {}",
                                        format_host_port(options_.host, options_.port),
                                        ec.message()));
    }
    bound_ = acceptor_.local_endpoint();
    context_.max_buffered_total = options_.max_buffered;
    max_connections_ = options_.max_connections;
    if (max_connections_ == 0) {
      rlimit limit{};
      getrlimit(RLIMIT_NOFILE, &limit);
      max_connections_ = limit.rlim_cur > 128 ? static_cast<std::size_t>(limit.rlim_cur - 64) : 64;
    }
    context_.on_close = [this](const std::shared_ptr<store::Connection>& c) { forget(c); };
    // Without a secret any client is served: on loopback, any user of this host.
    spdlog::info("store: listening on {}{}", endpoint_text(),
                 !options_.secret.empty() ? ", clients must prove the job's secret"
                 : bound_.address().is_loopback()
                     ? ", no secret: any user of this host can read the ranks' pids and last "
                       "output lines in it"
                     : "");
    if (options_.secret.empty() && !bound_.address().is_loopback()) {
      spdlog::warn("store: {} is reachable from other hosts and has no secret: anyone who can "
                   "reach it can read the ranks' pids and last output lines, end this job or "
                   "fake its result; give every agent the same --token-file (or DDPRUN_TOKEN)",
                   endpoint_text());
    }
    accept();
  }

  std::uint64_t requests_served() const {
    return context_.requests_served.load(std::memory_order_relaxed);
  }

  ~Impl() {
    stop();
    if (thread_.joinable()) thread_.join();
  }

  std::uint16_t port() const { return bound_.port(); }
  std::unique_ptr<Store> local_client(const std::string& run_id) const {
    return std::make_unique<MemoryStore>(shared_, run_id, endpoint_text());
  }
  std::string endpoint_text() const {
    return format_host_port(bound_.address().to_string(), bound_.port());
  }

  void start() {
    thread_ = std::thread([this] { run(); });
  }

  void run() {
    io_.run();
  }

  void stop() {
    if (stopping_.exchange(true)) return;
    asio::post(io_, [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      accept_retry_.cancel();
      auto open = connections_;
      for (const auto& c : open) c->close("");
      connections_.clear();
    });
  }

 private:
  tcp::endpoint resolve() {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(options_.host, ec);
    if (!ec) return {address, options_.port};
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                    tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) {
      throw ConnectionError(fmt::format("store: cannot resolve listen address '{}': {}",
                                        options_.host, ec ? ec.message() : "no addresses"));
    }
    return results.begin()->endpoint();
  }

  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || stopping_) return;
      if (ec) {
        // Out of descriptors (EMFILE) and the like: retrying at once would spin; pause first.
        spdlog::warn("store: accept on {} failed: {}; retrying in 100 ms", endpoint_text(),
                     ec.message());
        accept_retry_.expires_after(std::chrono::milliseconds(100));
        accept_retry_.async_wait([this](boost::system::error_code timer_ec) {
          if (!timer_ec && !stopping_) accept();
        });
        return;
      } else if (make_room()) {
        auto connection = std::make_shared<store::Connection>(std::move(socket), context_);
        connections_.insert(connection);
        connection->start();
      } else {
        context_.refusals.warn(fmt::format(
            "store: refusing a connection from {}: {} connections are open, the limit",
            store::peer_text(socket), connections_.size()));
      }
      accept();
    });
  }

  // Below the connection limit, or brought below it by closing the oldest connection that has
  // not finished its handshake. False: every open connection is a served client.
  bool make_room() {
    if (connections_.size() < max_connections_) return true;
    std::shared_ptr<store::Connection> oldest;
    for (const auto& c : connections_) {
      if (c->in_handshake() && (!oldest || c->connected_at() < oldest->connected_at())) oldest = c;
    }
    if (!oldest) return false;
    oldest->close(fmt::format("{} connections are open, the limit: this one, the oldest still in "
                              "its handshake, makes room for a new one",
                              connections_.size()));
    return connections_.size() < max_connections_;
  }

  void forget(const std::shared_ptr<store::Connection>& c) {
    connections_.erase(c);
  }

  StoreServerOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_{io_};
  tcp::endpoint bound_;
  std::shared_ptr<store::SharedStoreState> shared_ = std::make_shared<store::SharedStoreState>();
  store::ConnectionContext context_;
  std::unordered_set<std::shared_ptr<store::Connection>> connections_;
  std::size_t max_connections_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

TcpStoreServer::TcpStoreServer(StoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
TcpStoreServer::~TcpStoreServer() = default;
std::uint16_t TcpStoreServer::port() const { return impl_->port(); }
std::string TcpStoreServer::endpoint() const { return impl_->endpoint_text(); }
void TcpStoreServer::start() { impl_->start(); }
void TcpStoreServer::run() { impl_->run(); }
void TcpStoreServer::stop() { impl_->stop(); }
std::unique_ptr<Store> TcpStoreServer::local_client(const std::string& run_id) const {
  return impl_->local_client(run_id);
}
std::uint64_t TcpStoreServer::requests_served() const { return impl_->requests_served(); }

}  // namespace ddprun::store
