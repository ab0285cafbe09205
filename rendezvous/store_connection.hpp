#pragma once
// One client connection of the TCP store server (internal to the server; not installed).
// Reads frames, runs them against StoreState one at a time, writes the responses. The first
// frame must be a Hello with the right magic and version; its run id picks the key namespace.

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

// What every connection of one server shares.
struct ConnectionContext {
  StoreState& state;
  const Limits& limits;
  std::chrono::milliseconds read_timeout;
  std::function<void(const std::shared_ptr<Connection>&)> on_close;
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
  void finish_wait(const Request& request);
  void respond(Command command, const Response& response);
  void arm_stall_timer();

  boost::asio::ip::tcp::socket socket_;
  ConnectionContext& context_;
  boost::asio::steady_timer stall_timer_;
  boost::asio::steady_timer wait_timer_;
  std::string peer_;
  std::string run_id_;
  bool greeted_ = false;
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
