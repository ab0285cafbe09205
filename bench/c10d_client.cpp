#include "bench/c10d_client.hpp"

#include <signal.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace ddprun::bench {
namespace {

constexpr std::chrono::milliseconds kTimeout{30'000};

class C10dClient final : public LoadClient {
 public:
  explicit C10dClient(std::uint16_t port) : store_("127.0.0.1", options(port)) {}
  void set(const std::string& key, const std::string& value) override {
    store_.set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key) override {
    auto v = store_.get(key);
    return std::string(v.begin(), v.end());
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return store_.add(key, delta);
  }

 private:
  static c10d::TCPStoreOptions options(std::uint16_t port) {
    c10d::TCPStoreOptions o;
    o.port = port;
    o.isServer = false;
    o.waitWorkers = false;
    o.timeout = kTimeout;
    return o;
  }
  c10d::TCPStore store_;
};

}  // namespace

StoreSubject c10d_subject(const std::string& self) {
  StoreSubject s;
  s.label = "c10d TCPStore (libtorch 1.13)";
  s.server = [self](std::uint16_t port) {
    return std::vector<std::string>{self, "--serve-c10d", "--port", std::to_string(port)};
  };
  s.connect = [](std::uint16_t port) -> std::unique_ptr<LoadClient> {
    return std::make_unique<C10dClient>(port);
  };
  return s;
}

void serve_c10d(std::uint16_t port) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before the server's threads exist
  c10d::TCPStoreOptions o;
  o.port = port;
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = kTimeout;
  c10d::TCPStore server("127.0.0.1", o);
  int signo = 0;
  sigwait(&set, &signo);
}

}  // namespace ddprun::bench
