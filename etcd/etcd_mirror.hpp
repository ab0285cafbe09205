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
// is read whole again. A wait sees a key shortly after etcd applied it, never before.

#include <atomic>
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
  // Mirrors every key starting with `prefix` (a full etcd key: "/ddprun/<run id>/news/").
  EtcdMirror(std::vector<EtcdEndpoint> endpoints, std::string prefix);
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

  // For messages: how far the copy is, or why it is not ("following etcd from revision 42",
  // "not started: <error>").
  std::string state() const;

 private:
  void run();
  // Reads the prefix whole: the copy, and the revision to watch from.
  void read_all();
  void apply(const EtcdEvent& event);
  void fail(const std::string& what);

  const std::string prefix_;
  EtcdClient client_;  // the thread's own: EtcdClient is not thread-safe

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> keys_;
  bool synced_ = false;     // keys_ holds the prefix as of a read, and the watch follows it
  std::int64_t next_ = 0;   // the revision the watch resumes from
  std::string last_error_;  // the last failure of the read or the watch, "" after a success
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ddprun
