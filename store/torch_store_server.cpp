#include "store/torch_store_server.hpp"

#include <sys/resource.h>

#include <array>
#include <atomic>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "store/store.hpp"
#include "store/store_connection.hpp"
#include "store/store_state.hpp"

namespace ddprun::store {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// The one namespace of a workers' store: a store serves one attempt of one job.
const std::string kNamespace;
// Answers a client may leave unread before its connection stops reading its queries.
constexpr std::size_t kMostUnread = 16 * 1024 * 1024;

// What every connection of one server shares, all on the server's thread.
struct TorchContext {
  StoreState state;
  TorchLimits limits;
  std::string endpoint;
  RefusalLog refusals;
  std::atomic<std::uint64_t> requests_served{0};
  std::function<void(const void*)> on_close;
};

Request request(Command command, std::vector<std::string> keys,
                std::vector<std::string> values = {}) {
  Request r;
  r.command = command;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.timeout_ms = 1;  // nonzero: the server waits; torch's client keeps the deadline itself
  return r;
}

class TorchConnection final : public std::enable_shared_from_this<TorchConnection> {
 public:
  TorchConnection(tcp::socket socket, TorchContext& context)
      : socket_(std::move(socket)), context_(context), peer_(peer_text(socket_)) {
    boost::system::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
  }

  void start() { read_more(); }

  void close(const std::string& reason) {
    if (closed_) return;
    closed_ = true;
    if (!reason.empty()) {
      context_.refusals.warn(fmt::format("workers' store {}: closing the connection of {}: {}",
                                         context_.endpoint, peer_, reason));
    }
    cancel_wait();
    boost::system::error_code ignored;
    socket_.close(ignored);
    context_.on_close(this);
  }

 private:
  void read() {
    socket_.async_read_some(
        asio::buffer(chunk_), [self = shared_from_this()](boost::system::error_code ec,
                                                          std::size_t n) {
          self->reading_ = false;
          if (self->closed_) return;
          if (ec) {
            self->close(ec == asio::error::eof || ec == asio::error::connection_reset ||
                                ec == asio::error::operation_aborted
                            ? ""
                            : ec.message());
            return;
          }
          self->buffer_.append(self->chunk_.data(), n);
          self->process();
          self->read_more();
        });
  }

  // Reads and answers on unless the answers not yet taken by the client pile up: a client that
  // asks and does not read must not grow this process without bound. The write's end goes on.
  bool backlogged() const { return out_.size() + sending_.size() > kMostUnread; }
  void read_more() {
    if (closed_ || reading_ || backlogged()) return;
    reading_ = true;
    read();
  }

  // Runs every whole query in the buffer, in order. A pending WAIT holds nothing up: a client
  // whose deadline passed goes on with other queries (torch 2.1 and later first send
  // CANCEL_WAIT; 1.13 does not, and its wait stays until it waits again or its keys come).
  void process() {
    while (!closed_ && buffer_.size() >= needed_ && !backlogged()) {
      std::optional<TorchParsed> parsed;
      try {
        parsed = parse_torch_query(buffer_, dialect_, context_.limits, &needed_);
      } catch (const ProtocolError& e) {
        close(e.what());
        return;
      }
      if (!parsed) break;
      needed_ = 1;
      buffer_.erase(0, parsed->size);
      context_.requests_served.fetch_add(1, std::memory_order_relaxed);
      try {
        handle(parsed->query);
      } catch (const Error& e) {
        close(fmt::format("{}: {}", torch_command_name(parsed->query.command), e.what()));
        return;
      }
    }
    // What is left is the start of one query, within TorchLimits::max_query.
    flush();
  }

  void handle(TorchQuery& q) {
    using C = TorchCommand;
    auto& state = context_.state;
    switch (q.command) {
      case C::kValidate:
        return;
      case C::kPing:
        put_torch_u32(out_, q.number);
        return;
      case C::kSet:
        run(request(Command::kSet, std::move(q.keys), std::move(q.values)));
        return;
      case C::kCompareSet: {
        // torch's rule: a missing key is created only when `expected` is empty; otherwise the
        // client is answered `expected` and nothing is stored.
        auto current = try_get(q.keys[0]);
        const auto& expected = q.values[0];
        const auto& desired = q.values[1];
        if ((!current && expected.empty()) || (current && *current == expected)) {
          run(request(Command::kSet, {q.keys[0]}, {desired}));
          put_torch_value(out_, desired);
        } else {
          put_torch_value(out_, current ? *current : expected);
        }
        return;
      }
      case C::kGet:
        put_torch_value(out_, existing(q.keys[0]));
        return;
      case C::kAdd: {
        auto r = request(Command::kAdd, std::move(q.keys));
        r.number = q.delta;
        put_torch_i64(out_, run(std::move(r)).number);
        return;
      }
      case C::kCheck:
        put_torch_byte(out_, run(request(Command::kCheck, std::move(q.keys))).number != 0
                                 ? kTorchReady
                                 : kTorchNotReady);
        return;
      case C::kWait:
        wait(std::move(q.keys));
        return;
      case C::kNumKeys:
        put_torch_i64(out_, static_cast<std::int64_t>(state.num_keys(kNamespace)));
        return;
      case C::kDeleteKey:
        put_torch_i64(out_, run(request(Command::kErase, std::move(q.keys))).number);
        return;
      case C::kAppend: {
        auto value = try_get(q.keys[0]).value_or(std::string());
        value += q.values[0];
        run(request(Command::kSet, std::move(q.keys), {std::move(value)}));
        return;
      }
      case C::kMultiGet:
        for (const auto& k : q.keys) put_torch_value(out_, existing(k));
        return;
      case C::kMultiSet:
        run(request(Command::kMultiSet, std::move(q.keys), std::move(q.values)));
        return;
      case C::kCancelWait:
        cancel_wait();
        put_torch_byte(out_, kTorchWaitCanceled);
        return;
      case C::kList: {
        auto keys = state.keys(kNamespace);
        put_torch_i64(out_, static_cast<std::int64_t>(keys.size()));
        for (const auto& k : keys) put_torch_value(out_, k);
        return;
      }
      case C::kWatchKey:
      case C::kQueuePush:
      case C::kQueuePop:
      case C::kQueueLen:
        throw ProtocolError("not served by ddprun's workers' store (docs/reference.md)");
    }
  }

  Response run(Request&& r) {
    StoreState::WaiterId unused = 0;
    auto response = context_.state.execute(kNamespace, r, [] {}, unused);
    return std::move(*response);  // none of these requests waits
  }

  std::optional<std::string> try_get(const std::string& key) {
    auto response = run(request(Command::kTryGet, {key}));
    if (response.status == Status::kMissing) return std::nullopt;
    return std::move(response.values.at(0));
  }

  // torch's clients WAIT for a key before they GET it: one missing here was deleted between,
  // and torch's own server drops the connection too.
  std::string existing(const std::string& key) {
    auto value = try_get(key);
    if (!value) throw ProtocolError(fmt::format("the key '{}' does not exist", key));
    return std::move(*value);
  }

  // One wait per connection: a client waits again only once its last wait ended or it gave up on
  // it (torch 1.13 gives up without a word), and then that one is forgotten.
  void wait(std::vector<std::string> keys) {
    cancel_wait();
    StoreState::WaiterId id = 0;
    const auto serial = ++wait_serial_;
    auto ready = [weak = weak_from_this(), executor = socket_.get_executor(), serial] {
      // Called inside another connection's write: this one goes on once that one is done.
      asio::post(executor, [weak, serial] {
        if (auto self = weak.lock()) self->wait_over(serial);
      });
    };
    auto r = request(Command::kWait, std::move(keys));
    if (context_.state.execute(kNamespace, r, std::move(ready), id)) {
      put_torch_byte(out_, kTorchStopWaiting);
      return;
    }
    waiting_ = true;
    waiter_ = id;
  }

  void wait_over(std::uint64_t serial) {
    // Canceled, or replaced by a later wait, after the keys came and before this ran.
    if (closed_ || !waiting_ || serial != wait_serial_) return;
    waiting_ = false;
    waiter_ = 0;
    put_torch_byte(out_, kTorchStopWaiting);
    process();
  }

  void cancel_wait() {
    if (!waiting_) return;
    context_.state.cancel(waiter_);
    waiting_ = false;
    waiter_ = 0;
  }

  void flush() {
    if (writing_ || out_.empty() || closed_) return;
    writing_ = true;
    sending_.swap(out_);
    out_.clear();
    asio::async_write(socket_, asio::buffer(sending_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        self->writing_ = false;
                        self->sending_.clear();
                        if (ec) {
                          self->close(ec == asio::error::operation_aborted ? "" : ec.message());
                          return;
                        }
                        self->process();  // answers what waited for the backlog to drain
                        self->read_more();
                      });
  }

  tcp::socket socket_;
  TorchContext& context_;
  std::string peer_;
  TorchDialect dialect_ = TorchDialect::kUnknown;
  std::array<char, 4096> chunk_{};
  std::string buffer_;   // received, not yet run
  std::string out_;      // answers not yet handed to the socket
  std::string sending_;  // answers the socket is writing
  bool writing_ = false;
  bool reading_ = false;
  std::size_t needed_ = 1;  // bytes the buffer must hold before its next query can be whole
  bool waiting_ = false;
  StoreState::WaiterId waiter_ = 0;
  std::uint64_t wait_serial_ = 0;
  bool closed_ = false;
};

}  // namespace

class TorchStoreServer::Impl {
 public:
  explicit Impl(TorchStoreOptions options) : acceptor_(io_) {
    context_.limits = options.limits;
    const auto port = options.port;
    boost::system::error_code ec;
    if (options.host.empty()) {
      // Both families on one socket where the kernel has IPv6; IPv4 alone where it has not
      // (not when the port is taken: a client of ::1 would reach whoever holds it).
      listen(tcp::endpoint(tcp::v6(), port), false, ec);
      if (ec == asio::error::address_family_not_supported ||
          ec == boost::system::errc::address_not_available) {
        listen(tcp::endpoint(tcp::v4(), port), true, ec);
      }
    } else {
      auto address = asio::ip::make_address(options.host, ec);
      if (!ec) listen(tcp::endpoint(address, port), true, ec);
    }
    if (ec) {
      throw ConnectionError(fmt::format(
          "workers' store: cannot listen on {}: {}",
          format_host_port(options.host.empty() ? "*" : options.host, port), ec.message()));
    }
    bound_ = acceptor_.local_endpoint();
    context_.endpoint = format_host_port(bound_.address().to_string(), bound_.port());
    max_connections_ = options.max_connections;
    if (max_connections_ == 0) {
      rlimit limit{};
      getrlimit(RLIMIT_NOFILE, &limit);
      max_connections_ = std::max<std::size_t>(64, static_cast<std::size_t>(limit.rlim_cur / 4));
    }
    context_.on_close = [this](const void* c) { forget(c); };
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    asio::post(io_, [this] {
      stopping_ = true;  // an accept or a retry already queued behind this must not go on
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      accept_retry_.cancel();
      auto open = connections_;
      for (const auto& [_, c] : open) c->close("");
    });
    // The thread ends when nothing is left to run: the listener and every connection closed.
    thread_.join();
  }

  std::uint16_t port() const { return bound_.port(); }
  const std::string& endpoint() const { return context_.endpoint; }
  std::uint64_t requests_served() const {
    return context_.requests_served.load(std::memory_order_relaxed);
  }

 private:
  void listen(const tcp::endpoint& endpoint, bool v6_only, boost::system::error_code& ec) {
    ec.clear();
    if (acceptor_.is_open()) acceptor_.close(ec);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && endpoint.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(v6_only), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  }

  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || stopping_) return;
      if (ec) {
        // Out of descriptors and the like: retrying at once would spin.
        context_.refusals.warn(fmt::format("workers' store {}: accept failed: {}; retrying in "
                                           "100 ms", context_.endpoint, ec.message()));
        accept_retry_.expires_after(std::chrono::milliseconds(100));
        accept_retry_.async_wait([this](boost::system::error_code timer_ec) {
          if (!timer_ec && !stopping_) accept();
        });
        return;
      }
      if (connections_.size() >= max_connections_) {
        context_.refusals.warn(fmt::format(
            "workers' store {}: refusing a connection from {}: {} connections are open, the "
            "limit", context_.endpoint, peer_text(socket), connections_.size()));
      } else {
        auto connection = std::make_shared<TorchConnection>(std::move(socket), context_);
        connections_.emplace(connection.get(), connection);
        connection->start();
      }
      accept();
    });
  }

  void forget(const void* c) { connections_.erase(c); }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_{io_};
  tcp::endpoint bound_;
  TorchContext context_;
  std::unordered_map<const void*, std::shared_ptr<TorchConnection>> connections_;
  std::size_t max_connections_ = 0;
  bool stopping_ = false;  // on the server's thread only
  std::thread thread_;
};

TorchStoreServer::TorchStoreServer(TorchStoreOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
TorchStoreServer::~TorchStoreServer() = default;
std::uint16_t TorchStoreServer::port() const { return impl_->port(); }
std::string TorchStoreServer::endpoint() const { return impl_->endpoint(); }
std::uint64_t TorchStoreServer::requests_served() const { return impl_->requests_served(); }

}  // namespace ddprun::store
