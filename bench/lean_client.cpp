#include "bench/lean_client.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include <fmt/format.h>

#include "common/error.hpp"
#include "store/protocol.hpp"

namespace ddprun::bench {
namespace {

using store::Command;

class LeanClient final : public LoadClient {
 public:
  explicit LeanClient(std::uint16_t port) {
    for (int attempt = 0;; ++attempt) {
      fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(port);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
      const int err = errno;
      ::close(fd_);
      if (attempt == 200) throw ConnectionError("lean client: connect: " + errno_message(err));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    store::Request hello;
    hello.command = Command::kHello;
    hello.run_id = "bench";
    call(hello);
  }
  ~LeanClient() override { ::close(fd_); }

  void set(const std::string& key, const std::string& value) override {
    store::Request r;
    r.command = Command::kSet;
    r.keys = {key};
    r.values = {value};
    call(r);
  }
  std::string get(const std::string& key) override {
    store::Request r;
    r.command = Command::kGet;
    r.keys = {key};
    r.timeout_ms = 30'000;
    return call(r).values.at(0);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    store::Request r;
    r.command = Command::kAdd;
    r.keys = {key};
    r.number = delta;
    return call(r).number;
  }

 private:
  store::Response call(const store::Request& request) {
    const auto frame = store::encode_request(request);
    if (::send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frame.size())) {
      throw ConnectionError("lean client: send: " + errno_message(errno));
    }
    buffer_.clear();
    while (true) {
      if (auto size = store::complete_frame_size(buffer_, {}); size && buffer_.size() >= *size) {
        auto response = store::decode_response(
            request.command, std::string_view(buffer_).substr(store::kFrameHeaderSize,
                                                              *size - store::kFrameHeaderSize));
        if (response.status != store::Status::kOk) throw Error("lean client: request refused");
        return response;
      }
      char chunk[4096];
      const auto n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) throw ConnectionError("lean client: recv: " + errno_message(errno));
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  int fd_ = -1;
  std::string buffer_;
};

}  // namespace

StoreSubject lean_subject(const std::string& store_binary) {
  auto s = ddprun_subject(store_binary);
  s.label = "ddprun-store + minimal blocking client (diagnostic)";
  s.connect = [](std::uint16_t port) -> std::unique_ptr<LoadClient> {
    return std::make_unique<LeanClient>(port);
  };
  return s;
}

}  // namespace ddprun::bench
