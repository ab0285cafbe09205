#pragma once
// A copy of every key under one etcd prefix, kept current by one watch on a thread of its own.
//
// EtcdStore waits on it for the keys that every agent of a job waits for (a round's news: see
// kNewsPrefix in rendezvous/rendezvous_handler.hpp). Without it each such wait is a read and,
// when the key is not there yet, a watch: a new HTTP connection and a new stream on a member,
// several per agent and recovery. With it an agent has one stream for the job's life, and a
// key that N agents wait for costs etcd N events on streams already open.
//
// The copy starts from one read of the prefix and follows the watch from the revision after
// that read. A watch that breaks resumes on the next endpoint from the revision after the last
// event seen (EtcdClient::watch_prefix); when etcd has compacted that history away, the prefix
// is read whole again, and so it is after a minute without an event (a frozen member's stream
// never breaks; the read, bounded by one try, moves on from it). A wait sees a key shortly
// after etcd applied it, never before, and a deleted key until its delete reaches the copy.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.hpp"
#include "etcd/etcd_client.hpp"

namespace ddprun {

class EtcdMirror {
 public:
  // Mirrors every key starting with `prefix` (a full etcd key: "/ddprun/<run id>/news/"); after
  // `quiet` without an event the copy is read again (see above).
  EtcdMirror(std::vector<EtcdEndpoint> endpoints, std::string prefix,
             std::chrono::milliseconds quiet = std::chrono::minutes(1));
  // Stops the watch and joins its thread.
  ~EtcdMirror();
  EtcdMirror(const EtcdMirror&) = delete;
  EtcdMirror& operator=(const EtcdMirror&) = delete;

  bool covers(const std::string& full_key) const { return full_key.starts_with(prefix_); }

  // The key's value once the copy has it; nullopt at the deadline, or when `stop` is set (it is
  // looked at whenever the copy changes and on wake()).
  std::optional<std::string> wait(const std::string& full_key, Deadline deadline,
                                  const std::atomic<bool>& stop);
  // Makes every wait look at its `stop` flag now.
  void wake();

  // For messages: how far the copy is and its last error ("the copy of /ddprun/job/news/
  // follows etcd from revision 42", "... waits for a read of etcd; last error: ...").
  std::string state() const;

 private:
  void run();
  // Reads the prefix whole: the copy, and the revision to watch from.
  void read_all();
  void apply(const EtcdEvent& event);
  void fail(const std::string& what);
  // The next watch starts from a read of the prefix, after `pause` (0: at once).
  void start_over(std::chrono::milliseconds pause);

  const std::string prefix_;
  const std::chrono::milliseconds quiet_;
  EtcdClient client_;  // the thread's own: EtcdClient is not thread-safe

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> keys_;
  bool synced_ = false;     // the watch follows keys_ from next_; false: read the prefix first
  std::int64_t next_ = 0;   // the revision the watch resumes from
  std::string last_error_;  // the last failure of the read or the watch, "" after a success
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ddprun
