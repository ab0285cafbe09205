#include "store/store_connection.hpp"

#include <malloc.h>

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun::store {

namespace asio = boost::asio;

namespace {

// The most of an answer's storage a connection keeps between answers.
constexpr std::size_t kKeptAnswerBytes = 16 * 1024;

}  // namespace

void RefusalLog::warn(const std::string& message) {
  const auto now = std::chrono::steady_clock::now();
  if (now - window_start_ >= kWindow) {
    window_start_ = now;
    logged_ = 0;
  }
  if (logged_ >= kPerWindow) {
    ++suppressed_;
    return;
  }
  ++logged_;
  if (suppressed_ > 0) {
    spdlog::warn("{} ({} more closed connections not logged in the last {} s)", message,
                 suppressed_, kWindow.count());
    suppressed_ = 0;
  } else {
    spdlog::warn("{}", message);
  }
}

std::string peer_text(const asio::ip::tcp::socket& socket) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  return ec ? "unknown peer" : format_host_port(remote.address().to_string(), remote.port());
}

Connection::Connection(asio::ip::tcp::socket socket, ConnectionContext& context)
    : socket_(std::move(socket)),
      context_(context),
      stall_timer_(socket_.get_executor()),
      wait_timer_(socket_.get_executor()),
      handshake_(context.secret, context.served_for) {
  peer_ = peer_text(socket_);
  boost::system::error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);
}

void Connection::start() {
  spdlog::debug("store: client {} connected", peer_);
  arm_handshake_timer();
  read();
}

void Connection::arm_handshake_timer() {
  // The blocking requests' timer is free until the handshake is done.
  wait_timer_.expires_after(context_.read_timeout);
  wait_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->closed_ || self->handshake_.done()) return;
    self->close(fmt::format("no {} within {} ms of connecting", self->handshake_.waiting_for(),
                            self->context_.read_timeout.count()));
  });
}

void Connection::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  if (reason.empty()) {
    spdlog::debug("store: client {} disconnected", peer_);
  } else {
    log_closing(reason);
  }
  if (waiter_ != 0) cancel_wait();
  boost::system::error_code ignored;
  stall_timer_.cancel();
  wait_timer_.cancel();
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  const bool large = buffer_.capacity() > (1U << 20);
  buffer_ = std::string();
  account();
  if (large) malloc_trim(0);  // give a large frame's pages back to the system now
  if (context_.on_close) context_.on_close(shared_from_this());
}

void Connection::read() {
  socket_.async_read_some(asio::buffer(landing_),
                          [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                            self->on_read(ec, n);
                          });
}

void Connection::on_read(boost::system::error_code ec, std::size_t n) {
  if (closed_) return;
  if (ec) {
    if (ec != asio::error::operation_aborted) read_failed(ec);
    return;
  }
  if (!take(landing_.data(), n)) return;
  // A full landing may mean more is waiting: read on through the shared chunk until the
  // socket has nothing left.
  for (bool more = n == landing_.size(); more;) {
    auto& chunk = context_.chunk;
    n = socket_.read_some(asio::buffer(chunk), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec) {
      read_failed(ec);
      return;
    }
    if (!take(chunk.data(), n)) return;
    more = n == chunk.size();
  }
  account();
  process();
  if (closed_) return;
  arm_stall_timer();
  read();
}

void Connection::read_failed(boost::system::error_code ec) {
  if (ec == asio::error::eof || ec == asio::error::connection_reset) {
    close(buffer_.empty() ? "" : fmt::format("disconnected with {} bytes of an unfinished frame",
                                             buffer_.size()));
  } else {
    close("read failed: " + ec.message());
  }
}

bool Connection::take(const char* data, std::size_t n) {
  // Memory is refused, not allocated: a connection's pile beyond one maximal frame while a
  // request is still pending is abuse, and so is what would take all connections together
  // beyond the server's cap.
  if (buffer_.size() + n > context_.limits.max_frame + kFrameHeaderSize) {
    close(fmt::format("{} bytes queued behind a pending request", buffer_.size() + n));
    return false;
  }
  if (context_.max_buffered_total != 0 &&
      context_.buffered_total + (buffer_.size() - accounted_) + n > context_.max_buffered_total) {
    close(fmt::format("the store holds {} bytes of unfinished requests, its limit is {}; this "
                      "connection's {} more are refused",
                      context_.buffered_total + (buffer_.size() - accounted_),
                      context_.max_buffered_total, n));
    return false;
  }
  buffer_.append(data, n);
  return true;
}

void Connection::account() {
  context_.buffered_total -= accounted_;
  accounted_ = buffer_.size();
  context_.buffered_total += accounted_;
  // A large frame's storage is given back once it has been handled.
  if (buffer_.capacity() > (1U << 20) && buffer_.size() < buffer_.capacity() / 4) {
    buffer_.shrink_to_fit();
  }
}

void Connection::arm_stall_timer() {
  // A frame must arrive whole within the read timeout of its first byte: the deadline is per
  // frame, not per byte (a client sending one byte a second would otherwise never be dropped).
  // An idle connection between requests is normal (agents keep theirs for the whole job). The
  // timer is touched only when that changes: re-arming it on every request would cost more
  // than the request.
  const bool partial = !buffer_.empty() && !busy_;
  if (!partial) {
    if (stall_armed_) {
      stall_armed_ = false;
      stall_timer_.cancel();
    }
    return;
  }
  if (stall_armed_ && stall_frame_ == frames_done_) return;  // still the same frame
  stall_armed_ = true;
  stall_frame_ = frames_done_;
  stall_timer_.expires_after(context_.read_timeout);
  stall_timer_.async_wait([self = shared_from_this(), frame = frames_done_](
                              boost::system::error_code ec) {
    if (ec || self->closed_ || self->frames_done_ != frame) return;
    self->close(fmt::format("a frame not complete {} ms after its first byte ({} bytes arrived)",
                            self->context_.read_timeout.count(), self->buffer_.size()));
  });
}

void Connection::process() {
  while (!busy_ && !closed_) {
    std::optional<std::size_t> size;
    Request request;
    try {
      size = complete_frame_size(buffer_, context_.limits);
      if (!size) return;
      request = decode_request(std::string_view(buffer_).substr(kFrameHeaderSize,
                                                                *size - kFrameHeaderSize),
                               context_.limits);
    } catch (const ProtocolError& e) {
      close(std::string("protocol error: ") + e.what());
      return;
    }
    buffer_.erase(0, *size);
    ++frames_done_;
    account();
    try {
      handle(request);
    } catch (const Error& e) {
      // Tell the client why before hanging up; the socket closes once the reply is written.
      // The refusal is logged now: the store may stop before that write completes (its host's
      // agent no longer waits on this thread for its own calls).
      Response error;
      error.status = Status::kError;
      error.message = e.what();
      log_closing(fmt::format("{} refused: {}", command_name(request.command), e.what()));
      close_after_write_ = true;
      respond(request.command, error);
      return;
    }
  }
}

void Connection::handle(Request& request) {
  if (!handshake_.done()) {
    greet(request);
    return;
  }
  if (request.command == Command::kHello) throw ProtocolError("second hello");
  if (request.command == Command::kAuth) throw ProtocolError("auth after the handshake");
  // A waiting request run again once its keys are there (finish_wait) is the same request.
  if (&request != &pending_) context_.requests_served.fetch_add(1, std::memory_order_relaxed);
  if (spdlog::should_log(spdlog::level::trace)) {
    spdlog::trace("store: {} {} from {}", command_name(request.command),
                  request.keys.empty() ? std::string() : request.keys.front(), peer_);
  }

  StoreState::WaiterId waiter = 0;
  std::weak_ptr<Connection> weak = weak_from_this();
  StoreState::Ready ready;
  if (may_block(request.command)) {
    ready = [weak] {
      // Runs inside another client's write, maybe on another thread (an in-process handle):
      // defer to this connection's thread, so one handler never re-enters another.
      if (auto self = weak.lock()) {
        asio::post(self->socket_.get_executor(), [self] { self->finish_wait(); });
      }
    };
  }
  std::optional<Response> response;
  {
    std::lock_guard lock(context_.shared.mutex);
    response = context_.shared.state.execute(run_id_, request, ready, waiter);
  }
  if (response) {
    respond(request.command, *response);
    return;
  }
  busy_ = true;
  waiter_ = waiter;
  if (&request != &pending_) pending_ = std::move(request);
  wait_timer_.expires_after(std::chrono::milliseconds(pending_.timeout_ms));
  wait_timer_.async_wait([weak, waiter, command = pending_.command](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->closed_ || self->waiter_ != waiter) return;
    self->cancel_wait();
    self->pending_ = Request{};
    self->busy_ = false;
    Response timeout;
    timeout.status = Status::kTimeout;
    self->respond(command, timeout);
  });
}

void Connection::log_closing(const std::string& reason) {
  context_.refusals.warn(fmt::format("store: closing connection from {}: {}", peer_, reason));
}

void Connection::cancel_wait() {
  std::lock_guard lock(context_.shared.mutex);
  context_.shared.state.cancel(waiter_);
  waiter_ = 0;
}

void Connection::greet(const Request& request) {
  auto reply = handshake_.on_request(request);  // throws the refusal
  if (handshake_.done()) {
    wait_timer_.cancel();
    run_id_ = handshake_.run_id();
    spdlog::debug("store: client {} joined run '{}'", peer_, run_id_);
  }
  respond(request.command, reply);
}

void Connection::finish_wait() {
  if (closed_ || waiter_ == 0) return;
  waiter_ = 0;
  busy_ = false;
  wait_timer_.cancel();
  // The keys exist now unless someone erased one meanwhile; running the request again covers
  // both cases (it answers, or waits again, kept where it is). The remaining time is what the
  // timer had left.
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      wait_timer_.expiry() - asio::steady_timer::clock_type::now());
  pending_.timeout_ms = static_cast<std::uint32_t>(std::max<std::int64_t>(1, left.count()));
  try {
    handle(pending_);
  } catch (const Error& e) {
    close(e.what());
    return;
  }
  if (waiter_ == 0) pending_ = Request{};  // answered: an idle connection keeps no keys
  process();
}

void Connection::respond(Command command, const Response& response) {
  // Responses go out strictly in order: process() does not run the next request until this
  // write completed (busy_), so one buffer suffices, and its storage serves every response.
  try {
    encode_response(outgoing_, command, response, context_.limits);
  } catch (const ProtocolError& e) {
    Response error;
    error.status = Status::kError;
    error.message = e.what();
    encode_response(outgoing_, command, error, context_.limits);
  }
  busy_ = true;
  asio::async_write(socket_, asio::buffer(outgoing_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      if (self->closed_) return;
                      if (ec) {
                        self->close("write failed: " + ec.message());
                        return;
                      }
                      // A large answer's storage is not kept for the small ones after it.
                      if (self->outgoing_.capacity() > kKeptAnswerBytes) {
                        self->outgoing_ = std::string();
                      }
                      if (self->close_after_write_) {
                        self->close("");  // the refusal was logged when it was decided
                        return;
                      }
                      self->busy_ = false;
                      self->process();
                      if (!self->closed_) self->arm_stall_timer();
                    });
}

}  // namespace ddprun::store
