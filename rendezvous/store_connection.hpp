#pragma once
// One client connection of the TCP store server (internal to the server; not installed).
// Reads frames, runs them against StoreState one at a time, writes the responses. The first
// frame must be a Hello with the right magic and version; its run id picks the key namespace.
// With a secret, the second must be an Auth that proves it (rendezvous/store_auth.hpp); nothing
// else is served before. The whole handshake must finish within the read timeout.

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "rendezvous/protocol.hpp"
#include "rendezvous/store_state.hpp"

namespace ddprun::store {

class Connection;

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

// What every connection of one server shares.
struct ConnectionContext {
  StoreState& state;
  const Limits& limits;
  std::chrono::milliseconds read_timeout;
  const std::string& secret;  // empty: no authentication
  std::function<void(const std::shared_ptr<Connection>&)> on_close;
  RefusalLog refusals{};
};

class Connection final : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, ConnectionContext& context);

  void start();
  // Closes the socket and cancels any pending wait; `reason` is logged (empty: a normal close).
  void close(const std::string& reason);

 private:
  void read();
  void on_read(boost::system::error_code ec, std::size_t bytes);
  // Runs the frames in the buffer until one blocks or the buffer holds no whole frame.
  void process();
  void handle(const Request& request);
  // The handshake's requests: hello, then auth when the server has a secret.
  void greet(const Request& request);
  void arm_handshake_timer();
  void finish_wait(const Request& request);
  void respond(Command command, const Response& response);
  void arm_stall_timer();

  boost::asio::ip::tcp::socket socket_;
  ConnectionContext& context_;
  boost::asio::steady_timer stall_timer_;
  boost::asio::steady_timer wait_timer_;
  std::string peer_;
  std::string run_id_;
  enum class Stage { kHello, kAuth, kReady } stage_ = Stage::kHello;
  std::string client_nonce_;
  std::string server_nonce_;
  bool busy_ = false;    // a request is waiting for keys or its response is being written
  bool closed_ = false;
  bool stall_armed_ = false;   // the stall timer is running
  std::size_t stall_size_ = 0; // bytes pending when it was armed
  StoreState::WaiterId waiter_ = 0;
  std::string buffer_;   // received, not yet processed
  std::string outgoing_;
  std::string close_after_write_;  // set when the reply being written is a refusal
  std::array<char, 64 * 1024> chunk_{};
};

}  // namespace ddprun::store
