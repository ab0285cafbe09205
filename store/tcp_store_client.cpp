#include "store/tcp_store_client.hpp"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <random>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/random.hpp"
#include "common/strings.hpp"
#include "store/store_handshake.hpp"

namespace ddprun::store {

namespace asio = boost::asio;
using asio::ip::tcp;
using store::Command;
using store::Request;
using store::Response;
using store::Status;

namespace {

std::uint32_t to_timeout_ms(Deadline deadline) {
  // Rounded up, so the server never gives up before the caller's deadline.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline.remaining()).count();
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(ms, 0, UINT32_MAX));
}

std::string describe_keys(std::span<const std::string> keys) {
  if (keys.size() <= 4) return fmt::format("{}", keys);
  return fmt::format("[{}, {}, ... {} keys]", keys[0], keys[1], keys.size());
}

}  // namespace

class TcpStoreClient::Impl {
 public:
  Impl(StoreClientOptions options, Deadline deadline)
      : options_(std::move(options)),
        where_(format_host_port(options_.host, options_.port)),
        socket_(io_),
        rng_(static_cast<std::mt19937::result_type>(random_u64())) {
    connect(deadline);
  }

  std::string where() const { return where_; }

  void interrupt() {
    interrupted_ = true;
    {
      // A blocked send or recv returns at once (recv with 0 bytes) once its socket is shut
      // down. The descriptor is the one exchange() blocks on, never one already closed.
      std::lock_guard lock(blocking_mutex_);
      if (blocking_fd_ >= 0) ::shutdown(blocking_fd_, SHUT_RDWR);
    }
    asio::post(io_, [this] {
      boost::system::error_code ignored;
      socket_.cancel(ignored);
      backoff_.cancel();
    });
  }

  bool pipeline_get(const std::string& key, Deadline deadline) {
    if (queued_ || ahead_) return false;
    const auto wait = std::chrono::milliseconds(to_timeout_ms(deadline));
    queued_ = Ahead{key, wait, Deadline::after(wait)};
    return true;
  }

  // Sends one request and returns the server's response. A request the server holds may take
  // `reply_grace` longer than `deadline` to be answered.
  Response call(Request request, Deadline deadline) {
    const auto start = Clock::now();
    Deadline reply_deadline = deadline;
    if (may_block(request.command)) {
      request.timeout_ms = to_timeout_ms(deadline);
      reply_deadline = Deadline::at(deadline.when() + options_.reply_grace);
    }
    // Empty: the request went ahead (pipeline_get), and only its answer is read.
    std::string frame;
    std::optional<Ahead> carried;  // the get this request carries
    if (ahead_ && request.command == Command::kGet && request.keys.front() == ahead_->key) {
      // The store answers by the end of the get's own wait; this call's deadline may end the
      // read sooner.
      reply_deadline =
          reply_deadline.min(Deadline::at(ahead_->waits_until.when() + options_.reply_grace));
      ahead_.reset();
    } else {
      if (ahead_) {
        // Its answer would come first. The caller may wait long on a store that is gone, so it
        // is told, as of a connection lost, rather than reconnected here.
        const auto dropped = ahead_->key;
        close();
        throw ConnectionError(fmt::format(
            "store at {}: {} of {} came before the answer to the get of {} sent ahead on the "
            "same connection; the connection was closed",
            where_, store::command_name(request.command), describe_keys(request.keys), dropped));
      }
      // Taken now: a request that fails before it is sent drops the get with it.
      carried = std::exchange(queued_, std::nullopt);
      if (!socket_.is_open()) connect(deadline);
      frame = store::encode_request(request, options_.limits);
      if (carried) {
        auto get = Request{};
        get.command = Command::kGet;
        get.keys = {carried->key};
        get.timeout_ms = static_cast<std::uint32_t>(carried->wait.count());
        frame += store::encode_request(get, options_.limits);
        ahead_ = carried;
      }
    }
    try {
      exchange(frame, reply_deadline);
      // The store began the get's wait once it had answered this request.
      if (carried && ahead_) ahead_->waits_until = Deadline::after(carried->wait);
      auto response = store::decode_response(request.command, reply_body_, options_.limits);
      if (response.status == Status::kError) {
        close();
        throw Error(fmt::format("store at {} refused {} of {}: {}", where_,
                                store::command_name(request.command),
                                describe_keys(request.keys), response.message));
      }
      if (response.status == Status::kTimeout) {
        throw TimeoutError(fmt::format("timed out after {} waiting for key(s) {} in store at {}",
                                       format_duration(Clock::now() - start),
                                       describe_keys(keys_waited_for(request)), where_));
      }
      return response;
    } catch (const ProtocolError& e) {
      close();
      throw ProtocolError(fmt::format("store at {} sent a bad reply to {}: {}", where_,
                                      store::command_name(request.command), e.what()));
    }
  }

 private:
  void connect(Deadline deadline) {
    const auto start = Clock::now();
    std::string first_error;
    std::string last_error;
    int attempts = 0;
    // From 1 ms: agents of a job start together, and one that asks before node 0 listens
    // (refused, which costs a SYN and a reset) should not lose 10 ms to the first pause.
    auto backoff = std::chrono::milliseconds(1);
    while (true) {
      check_interrupted("connecting");
      ++attempts;
      auto ec = try_connect(deadline);
      if (!ec) {
        if (attempts > 1) {
          spdlog::debug("store: connected to {} after {} attempts", where_, attempts);
        }
        return;
      }
      last_error = ec.message();
      if (first_error.empty()) first_error = last_error;
      check_interrupted("connecting");
      if (deadline.expired()) break;
      // Exponential backoff with +-25% jitter so that many agents started together do not
      // hammer the store in lockstep.
      std::uniform_real_distribution<double> jitter(0.75, 1.25);
      auto pause = std::chrono::duration_cast<Clock::duration>(backoff * jitter(rng_));
      sleep(std::min(pause, deadline.remaining()));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      if (deadline.expired()) break;
    }
    throw ConnectionError(fmt::format(
        "could not connect to store at {} within {} ({} attempts; last error: {}{})", where_,
        format_duration(Clock::now() - start), attempts, last_error,
        first_error != last_error ? "; first error: " + first_error : ""));
  }

  boost::system::error_code try_connect(Deadline deadline) {
    close();
    boost::system::error_code result = asio::error::timed_out;
    tcp::resolver resolver(io_);
    boost::system::error_code not_literal;
    const auto literal = asio::ip::make_address(options_.host, not_literal);
    if (!not_literal) {
      // An address needs no resolver: asio resolves asynchronously on a thread of its own per
      // io_context, a thread per connection that an agent and 16384 simulated ones can do
      // without (and that ran into the machine's pid limit).
      socket_.async_connect(tcp::endpoint(literal, options_.port),
                            [&](boost::system::error_code cec) { result = cec; });
    } else {
      resolver.async_resolve(
          options_.host, std::to_string(options_.port),
          [&](boost::system::error_code ec, const tcp::resolver::results_type& endpoints) {
            if (ec) {
              result = ec;
              return;
            }
            asio::async_connect(socket_, endpoints,
                                [&](boost::system::error_code cec, const tcp::endpoint&) {
                                  result = cec;
                                });
          });
    }
    if (!run_until(deadline)) {
      resolver.cancel();
      close();
      drain();
      return asio::error::timed_out;
    }
    if (result) {
      close();
      return result;
    }
    boost::system::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    socket_.set_option(asio::socket_base::keep_alive(true), ignored);
    // exchange() blocks in send and recv, bounded by socket timeouts set from the deadline.
    socket_.non_blocking(false, ignored);
    send_timeout_ = Clock::duration::zero();
    receive_timeout_ = Clock::duration::zero();
    // The handshake (store/store_handshake.hpp). A refusal here is final, not retried.
    store::ClientHandshake shake(options_.secret, options_.run_id, where_);
    Response reply;
    const auto bounded = deadline.min(Deadline::after(options_.handshake_timeout));
    if (auto ec = handshake(shake.hello(), bounded, &reply)) {
      if (ec == asio::error::timed_out && !deadline.expired()) {
        close();
        throw ConnectionError(fmt::format(
            "the program at {} accepted the connection but did not answer the store's "
            "handshake within {}: it is not a ddprun store, or its host is too busy to answer "
            "(stopped, swapping); check --master-port / --rdzv-endpoint",
            where_, format_duration(options_.handshake_timeout)));
      }
      return ec;
    }
    try {
      const auto auth = shake.on_hello_reply(reply);
      if (!auth) return {};
      if (auto ec = handshake(*auth, deadline, &reply)) return ec;
      shake.on_auth_reply(reply);
    } catch (const ConnectionError&) {
      close();
      throw;
    }
    return {};
  }

  // One request of the handshake. An error code: the connection broke or timed out (worth
  // another try); throws AuthError when the server refused the proof (retrying does not fix
  // that), ProtocolError for other refusals.
  boost::system::error_code handshake(const Request& request, Deadline deadline,
                                      Response* reply) {
    Response response;
    try {
      exchange(store::encode_request(request, options_.limits), deadline);
      response = store::decode_response(request.command, reply_body_, options_.limits);
    } catch (const TimeoutError&) {
      return asio::error::timed_out;
    } catch (const ConnectionError&) {
      return asio::error::connection_reset;
    } catch (const ProtocolError& e) {
      // Another program on the port (a web server, a c10d TCPStore, a database): say so now
      // rather than time out or report an internal error.
      close();
      throw ConnectionError(fmt::format(
          "the program at {} is not a ddprun store: its answer to the {} is not the store's "
          "protocol ({}); check --master-port / --rdzv-endpoint",
          where_, request.command == Command::kHello ? "handshake" : "authentication",
          e.what()));
    }
    if (response.status != Status::kOk) {
      close();
      if (request.command == Command::kAuth) {
        throw AuthError(fmt::format("store at {} refused this agent: {}", where_,
                                    response.message));
      }
      throw ProtocolError(
          fmt::format("store at {} refused the handshake: {}", where_, response.message));
    }
    *reply = std::move(response);
    return {};
  }

  // Writes `frame` (none when empty) and reads one response frame into reply_body_. Bytes
  // past it begin the answer to a get sent ahead, kept for its read; with none ahead they are
  // an error.
  //
  // The hot path of every store call, so it talks to the socket directly, blocking: one send
  // and one recv per request, with no poll or eventfd between them (each would be another
  // system call per operation). The deadline bounds each call through
  // the socket's SO_SNDTIMEO/SO_RCVTIMEO, set only when the one in force would outlast it
  // (calls with similar deadlines set none); interrupt() shuts the socket down, which wakes
  // the blocked call.
  void exchange(const std::string& frame, Deadline deadline) {
    const auto start = Clock::now();
    const int fd = socket_.native_handle();
    BlockingCall blocking(*this, fd);
    check_interrupted("sending a request");
    std::size_t sent = 0;
    while (sent < frame.size()) {
      bound(fd, SO_SNDTIMEO, send_timeout_, deadline, start);
      auto n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
      } else if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        check_interrupted("sending a request");  // the timeout: bound() checks the deadline
      } else {
        lost(errno, start);
      }
    }
    while (true) {
      std::optional<std::size_t> size;
      try {
        size = store::complete_frame_size(incoming_, options_.limits);
      } catch (const ProtocolError&) {
        close();
        throw ProtocolError(fmt::format("store at {} announced an oversized reply", where_));
      }
      if (size) {
        if (*size != incoming_.size() && !ahead_) {
          const auto beyond = incoming_.size() - *size;
          close();
          throw ProtocolError(
              fmt::format("store at {} sent {} bytes beyond its reply", where_, beyond));
        }
        reply_body_.assign(incoming_, store::kFrameHeaderSize, *size - store::kFrameHeaderSize);
        incoming_.erase(0, *size);
        return;
      }
      bound(fd, SO_RCVTIMEO, receive_timeout_, deadline, start);
      // Into a chunk on the stack, then appended: incoming_ grows only by what arrived, so it
      // is never zero-filled ahead of a recv and each client's buffer stays as small as its
      // frames.
      char chunk[16 * 1024];
      const auto n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n > 0) incoming_.append(chunk, static_cast<std::size_t>(n));
      if (n == 0) {
        check_interrupted("waiting for a reply");  // shut down by interrupt()
        lost(ECONNRESET, start, "the store closed the connection");
      }
      if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) lost(errno, start);
      if (n < 0) check_interrupted("waiting for a reply");
    }
  }

  // Marks `fd` as the one a blocking call waits on, for interrupt(), while it is in scope.
  class BlockingCall {
   public:
    BlockingCall(Impl& impl, int fd) : impl_(impl) {
      std::lock_guard lock(impl_.blocking_mutex_);
      impl_.blocking_fd_ = fd;
    }
    ~BlockingCall() {
      std::lock_guard lock(impl_.blocking_mutex_);
      impl_.blocking_fd_ = -1;
    }
    BlockingCall(const BlockingCall&) = delete;
    BlockingCall& operator=(const BlockingCall&) = delete;

   private:
    Impl& impl_;
  };

  // Before a blocking send or recv: throws TimeoutError once the deadline has passed; sets the
  // socket's timeout `option` (whose value in force is `in_force`; zero: none) to the time
  // left when the one in force would outlast it, or would end the wait before half of it (a
  // wasted wake-up each time: a 30-s wait after a 25-ms call). Calls with similar deadlines set
  // none. A call that returns at the timeout while time is left just goes round again.
  void bound(int fd, int option, Clock::duration& in_force, Deadline deadline,
             Clock::time_point start) {
    const auto left = deadline.remaining();
    if (left <= Clock::duration::zero()) {
      close();
      throw TimeoutError(fmt::format("no reply from store at {} after {}", where_,
                                     format_duration(Clock::now() - start)));
    }
    if (in_force != Clock::duration::zero() && in_force <= left && 2 * in_force >= left) return;
    // At least 1 us: a zero timeout would mean none.
    const auto us = std::max<std::int64_t>(
        1, std::chrono::duration_cast<std::chrono::microseconds>(left).count());
    timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
    if (::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)) != 0) lost(errno, start);
    in_force = std::chrono::microseconds(us);
  }

  [[noreturn]] void lost(int err, Clock::time_point start, const char* what = nullptr) {
    close();
    check_interrupted("waiting for a reply");
    throw ConnectionError(fmt::format("lost connection to store at {} after {}: {}", where_,
                                      format_duration(Clock::now() - start),
                                      what ? what : errno_message(err)));
  }

  // Runs the io_context until its work is done (true) or the deadline passes (false).
  bool run_until(Deadline deadline) {
    io_.restart();
    io_.run_until(deadline.when());
    return io_.stopped();
  }

  void drain() {
    io_.restart();
    io_.run();
  }

  void sleep(Clock::duration pause) {
    backoff_.expires_after(pause);
    backoff_.async_wait([](boost::system::error_code) {});
    io_.restart();
    io_.run();
  }

  void close() {
    {
      std::lock_guard lock(blocking_mutex_);
      blocking_fd_ = -1;  // interrupt() must not shut down a descriptor number reused later
    }
    boost::system::error_code ignored;
    socket_.close(ignored);
    // What the connection was still to answer goes with it; a get queued and not yet sent
    // goes with the next call, on the next connection.
    ahead_.reset();
    incoming_.clear();
  }

  void check_interrupted(const char* doing) {
    if (interrupted_) {
      close();
      drain();
      throw InterruptedError(fmt::format("interrupted while {} (store at {})", doing, where_));
    }
  }

  StoreClientOptions options_;
  std::string where_;
  asio::io_context io_;
  tcp::socket socket_;
  asio::steady_timer backoff_{io_};
  // A get for pipeline_get: queued until the next call writes it behind its own request, then
  // ahead (sent, its answer not read) until a get of the same key reads the answer.
  struct Ahead {
    std::string key;
    std::chrono::milliseconds wait;  // the store's wait for it, from when it takes it up
    Deadline waits_until;            // when that wait ends, once known
  };
  std::optional<Ahead> queued_;
  std::optional<Ahead> ahead_;
  std::string incoming_;  // received and not yet taken: only an answer to the get ahead
  std::string reply_body_;
  // The socket's SO_SNDTIMEO and SO_RCVTIMEO as last set on this connection (zero: none).
  Clock::duration send_timeout_{};
  Clock::duration receive_timeout_{};
  std::mutex blocking_mutex_;
  int blocking_fd_ = -1;  // the socket a send or recv may be blocked on (see interrupt())
  std::atomic<bool> interrupted_{false};
  std::mt19937 rng_;
};

TcpStoreClient::TcpStoreClient(StoreClientOptions options, Deadline connect_deadline)
    : impl_(std::make_unique<Impl>(std::move(options), connect_deadline)) {}
TcpStoreClient::~TcpStoreClient() = default;

std::string TcpStoreClient::describe() const { return impl_->where(); }
void TcpStoreClient::interrupt() { impl_->interrupt(); }

namespace {
Request make(Command c, std::vector<std::string> keys = {}, std::vector<std::string> values = {}) {
  Request r;
  r.command = c;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}
}  // namespace

void TcpStoreClient::set(const std::string& key, const std::string& value, Deadline deadline) {
  impl_->call(make(Command::kSet, {key}, {value}), deadline);
}

std::string TcpStoreClient::get(const std::string& key, Deadline deadline) {
  return impl_->call(make(Command::kGet, {key}), deadline).values.at(0);
}

std::optional<std::string> TcpStoreClient::try_get(const std::string& key, Deadline deadline) {
  auto r = impl_->call(make(Command::kTryGet, {key}), deadline);
  if (r.status == Status::kMissing) return std::nullopt;
  return r.values.at(0);
}

bool TcpStoreClient::check(const std::vector<std::string>& keys, Deadline deadline) {
  return impl_->call(make(Command::kCheck, keys), deadline).number != 0;
}

std::int64_t TcpStoreClient::add(const std::string& key, std::int64_t delta, Deadline deadline) {
  auto r = make(Command::kAdd, {key});
  r.number = delta;
  return impl_->call(std::move(r), deadline).number;
}

std::string TcpStoreClient::compare_set(const std::string& key, const std::string& expected,
                                        const std::string& desired, Deadline deadline) {
  return impl_->call(make(Command::kCompareSet, {key}, {expected, desired}), deadline).values.at(0);
}

bool TcpStoreClient::erase(const std::string& key, Deadline deadline) {
  return impl_->call(make(Command::kErase, {key}), deadline).number != 0;
}

std::vector<std::string> TcpStoreClient::multi_get(const std::vector<std::string>& keys,
                                                   Deadline deadline) {
  return impl_->call(make(Command::kMultiGet, keys), deadline).values;
}

void TcpStoreClient::multi_set(const std::vector<std::string>& keys,
                               const std::vector<std::string>& values, Deadline deadline) {
  impl_->call(make(Command::kMultiSet, keys, values), deadline);
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, Deadline deadline) {
  impl_->call(make(Command::kWait, keys), deadline);
}

Store::Arrival TcpStoreClient::arrive(const std::string& counter, std::int64_t total,
                                      const std::string& release, const std::string& then_get,
                                      Deadline deadline) {
  auto r = make(Command::kArrive, {counter, release, then_get});
  r.number = total;
  auto response = impl_->call(std::move(r), deadline);
  return Arrival{response.number, std::move(response.values.at(0))};
}

bool TcpStoreClient::pipeline_get(const std::string& key, Deadline deadline) {
  return impl_->pipeline_get(key, deadline);
}

std::int64_t TcpStoreClient::num_keys(Deadline deadline) {
  return impl_->call(make(Command::kNumKeys), deadline).number;
}

void TcpStoreClient::ping(Deadline deadline) { impl_->call(make(Command::kPing), deadline); }

}  // namespace ddprun::store
