#pragma once
// One client connection of the TCP store server (internal to the server; not installed).
// Reads frames, runs them against StoreState one at a time, writes the responses. The first
// frame must be a Hello with the right magic and version; its run id picks the key namespace.
// With a secret, the second must be an Auth that proves it (store/store_auth.hpp); nothing
// else is served before. The whole handshake must finish within the read timeout.

#include <cstdint>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "store/protocol.hpp"
#include "store/store_handshake.hpp"
#include "store/store_state.hpp"

namespace ddprun::store {

class Connection;

// "host:port" of the socket's peer, for messages ("unknown peer" when it is gone already).
std::string peer_text(const boost::asio::ip::tcp::socket& socket);

// Refusals are logged at a bounded rate: a flood of bad clients must not flood the log too.
class RefusalLog {
 public:
  static constexpr int kPerWindow = 20;
  static constexpr std::chrono::seconds kWindow{10};
  // Logs `message` as a warning unless this window's share is spent; the first one logged
  // after a quiet spell says how many were left out.
  void warn(const std::string& message);

 private:
  std::chrono::steady_clock::time_point window_start_{};
  int logged_ = 0;
  int suppressed_ = 0;
};

// What every connection of one server shares (all on the server's one thread).
struct ConnectionContext {
  SharedStoreState& shared;  // lock shared.mutex around every use of shared.state
  const Limits& limits;
  std::chrono::milliseconds read_timeout;
  const std::string& secret;      // empty: no authentication
  const std::string& served_for;  // the hosting agent's run id; empty: ddprun-store
  std::function<void(const std::shared_ptr<Connection>&)> on_close;
  RefusalLog refusals{};
  // Bytes received and not yet processed, over all connections, and the most allowed: a
  // connection whose bytes would go beyond it is closed instead of buffered.
  std::size_t buffered_total = 0;
  std::size_t max_buffered_total = 0;
  // Where every connection reads into before keeping what it got: one buffer for the server,
  // not one per connection (an idle connection costs no read buffer).
  std::vector<char> chunk = std::vector<char>(64 * 1024);
  // Requests answered after the handshake, read by other threads for the metrics.
  std::atomic<std::uint64_t> requests_served{0};
};

class Connection final : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, ConnectionContext& context);

  void start();
  // Closes the socket and cancels any pending wait; `reason` is logged (empty: a normal close).
  void close(const std::string& reason);
  // Still in the handshake (no hello, or no proof of the secret yet), and since when.
  bool in_handshake() const { return !handshake_.done(); }
  std::chrono::steady_clock::time_point connected_at() const { return connected_at_; }

 private:
  // Reads what arrives into landing_ (the rest of a larger frame through the shared chunk).
  void read();
  void on_read(boost::system::error_code ec, std::size_t n);
  // Appends received bytes to buffer_ within the limits; false: the connection was closed.
  bool take(const char* data, std::size_t n);
  // A read that failed: closes the connection, saying why.
  void read_failed(boost::system::error_code ec);
  // Keeps context_.buffered_total in step with buffer_.
  void account();
  // Runs the frames in the buffer until one blocks or the buffer holds no whole frame.
  void process();
  // Runs a request; one that must wait for keys is kept (pending_) until they exist.
  void handle(Request& request);
  // The handshake's requests: hello, then auth when the server has a secret.
  void greet(const Request& request);
  void arm_handshake_timer();
  // Runs the waiting request (pending_) again once its keys are there.
  void finish_wait();
  // Forgets this connection's waiter in the state (its time ran out, or the connection closed).
  void cancel_wait();
  // The warning close() gives for a connection closed for `reason` (rate-bounded).
  void log_closing(const std::string& reason);
  void respond(Command command, const Response& response);
  void arm_stall_timer();

  boost::asio::ip::tcp::socket socket_;
  ConnectionContext& context_;
  boost::asio::steady_timer stall_timer_;
  boost::asio::steady_timer wait_timer_;
  std::string peer_;
  std::string run_id_;
  ServerHandshake handshake_;
  bool busy_ = false;    // a request is waiting for keys or its response is being written
  bool closed_ = false;
  bool stall_armed_ = false;   // the frame timer is running
  std::uint64_t frames_done_ = 0;   // frames taken from the buffer so far
  std::uint64_t stall_frame_ = 0;   // frames_done_ when the frame timer was armed
  std::size_t accounted_ = 0;  // buffer_.size() as counted in context_.buffered_total
  std::chrono::steady_clock::time_point connected_at_ = std::chrono::steady_clock::now();
  StoreState::WaiterId waiter_ = 0;
  // The blocking request waiting for keys (while waiter_ != 0): kept here, not in the
  // callbacks that wake it, so that waking a thousand waiters copies no request.
  Request pending_;
  std::string buffer_;   // received, not yet processed
  // Where a read lands: asio reads into it when the socket becomes readable, with no system
  // call before that (an async_wait re-armed the socket with epoll_ctl for every request).
  // Sized for a typical request; a larger one continues through the shared chunk.
  std::array<char, 512> landing_{};
  std::string outgoing_;
  bool close_after_write_ = false;  // the reply being written is a refusal (already logged)
};

}  // namespace ddprun::store
