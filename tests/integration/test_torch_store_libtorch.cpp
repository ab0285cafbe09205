// The workers' store (store/torch_store_server.hpp) with libtorch's own C++ client, the one
// ddp_resnet uses with TORCHELASTIC_USE_AGENT_STORE=True (Debian's libtorch 1.13 here).

#include <catch2/catch.hpp>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "store/torch_store_server.hpp"

using namespace std::chrono_literals;

namespace {

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

c10::intrusive_ptr<c10d::TCPStore> client_of(const ddprun::store::TorchStoreServer& server) {
  c10d::TCPStoreOptions options;
  options.port = server.port();
  options.isServer = false;
  options.numWorkers = 2;  // the client joins with an ADD of init/, as torch's Python one does
  options.waitWorkers = true;
  options.timeout = 30s;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

}  // namespace

TEST_CASE("workers' store: libtorch's C++ TCPStore client, every call it makes",
          "[workers][torch-store]") {
  ddprun::store::TorchStoreServer server;
  auto store = client_of(server);
  auto other = client_of(server);
  store->set("a", bytes("1"));
  CHECK(other->get("a") == bytes("1"));
  CHECK(store->add("n", 4) == 4);
  CHECK(other->add("n", 1) == 5);
  CHECK(store->compareSet("c", {}, bytes("x")) == bytes("x"));
  CHECK(store->compareSet("c", bytes("x"), bytes("y")) == bytes("y"));
  CHECK(store->compareSet("c", bytes("x"), bytes("z")) == bytes("y"));
  CHECK(store->check({"a", "n"}));
  CHECK_FALSE(store->check({"a", "missing"}));
  store->wait({"a", "c"}, 5s);
  CHECK_THROWS(store->wait({"never"}, 200ms));
  CHECK(other->deleteKey("a"));
  CHECK_FALSE(other->deleteKey("a"));
  CHECK(other->getNumKeys() == 3);  // init/, n, c
  c10d::PrefixStore prefixed("/worker/attempt_2", other);
  prefixed.set("k", bytes("v"));
  CHECK(other->get("/worker/attempt_2/k") == bytes("v"));
}
