#pragma once
// The key-value store agents rendezvous through. Implementations: TcpStoreClient (a TCP
// client), MemoryStore (in-process: the agent that serves the TCP store, and unit tests),
// EtcdStore, and PrefixStore (a decorator that namespaces keys).
//
// Every call that can block takes a Deadline and throws TimeoutError naming the key(s) and the
// time waited. Connection problems throw ConnectionError. Implementations are NOT required to be
// thread-safe unless they say so: give each thread its own client.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.hpp"

namespace ddprun::store {

class Pipelining;

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value, Deadline deadline) = 0;
  // Blocks until `key` exists, then returns its value.
  virtual std::string get(const std::string& key, Deadline deadline) = 0;
  // Returns the value, or nullopt at once when the key does not exist.
  virtual std::optional<std::string> try_get(const std::string& key, Deadline deadline) = 0;
  // True when every key exists; never blocks on the keys.
  virtual bool check(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // Adds `delta` to the int64 stored at key (missing counts as 0) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) = 0;
  // If the current value equals `expected` (a missing key equals ""), stores `desired`.
  // Returns the value after the operation, so the caller won iff the result is `desired`.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired, Deadline deadline) = 0;
  // Returns true if the key existed.
  virtual bool erase(const std::string& key, Deadline deadline) = 0;
  // Blocks until every key exists, then returns the values in order.
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                             Deadline deadline) = 0;
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values, Deadline deadline) = 0;
  // Blocks until every key exists.
  virtual void wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // A barrier's arrival and the wait that follows it, in one call: adds 1 to the counter at
  // `counter`; the arrival that makes it `total` sets `release` to "1"; then blocks until
  // `then_get` exists (it may be `release`). Returns the counter after this arrival and
  // then_get's value. A TCP store does it in one request (the node arriving needs no answer
  // before it waits); this default takes the three calls. A timeout comes after the arrival.
  struct Arrival {
    std::int64_t count = 0;
    std::string value;
  };
  virtual Arrival arrive(const std::string& counter, std::int64_t total,
                         const std::string& release, const std::string& then_get,
                         Deadline deadline) {
    Arrival a;
    a.count = add(counter, 1, deadline);
    if (a.count == total) set(release, "1", deadline);
    a.value = get(then_get, deadline);
    return a;
  }
  // The store's pipelining (see Pipelining below) where it has it, a TCP client's; null
  // where it has none.
  virtual Pipelining* pipelining() { return nullptr; }
  virtual std::int64_t num_keys(Deadline deadline) = 0;
  virtual void ping(Deadline deadline) = 0;

  // Where the store lives, for messages ("127.0.0.1:29500", "memory").
  virtual std::string describe() const = 0;

  // Thread-safe and final: the call in progress and every later call throw InterruptedError.
  // (A caller that still needs the store afterwards opens a new connection.)
  virtual void interrupt() = 0;
};

// An optional capability of a store connection: the next call's request and a get of `key` go
// to the store in one write (the store waits for the key as long as `deadline` leaves now), and
// a later get(key) reads the answer already asked for. The restart uses it to send the next
// round's outcome watch with this round's arrival: one request for the store to read, not two
// (agent/settlement.hpp). Any other call in between closes the connection and throws
// ConnectionError: the get's answer would come first.
class Pipelining {
 public:
  // False: refused and nothing queued, where a pipelined get is already queued or unanswered.
  virtual bool pipeline_get(const std::string& key, Deadline deadline) = 0;

 protected:
  ~Pipelining() = default;
};

// Opens another connection to the same store, connecting until the deadline (for a thread that
// blocks on its own: the outcome watcher, the keep-alive).
using StoreOpener = std::function<std::unique_ptr<Store>(Deadline)>;

// Encodes/decodes the int64 values `add` keeps (decimal text, like c10d's TCPStore).
std::int64_t parse_counter(const std::string& value, const std::string& key);

}  // namespace ddprun::store
