#pragma once
// An agent's part in tree fan-out: it starts the agents of its subtree (as the command starts
// the first level), passes their output lines and reports up its own stdout and stderr, and
// the command's control lines ("go", "ping", "signal N") down. When one of its hosts' remote
// shell exits it says so upward ("ended"), on behalf of the hosts below that one too, since
// nobody else can. It runs on a thread of its own, started with every signal blocked so that
// the agent's signal handling stays where it is.

#include <memory>
#include <string>

#include "cluster/head_link.hpp"
#include "cluster/session_protocol.hpp"
#include "common/deadline.hpp"

namespace ddprun {

class SubtreeRelay {
 public:
  // Starts the agents of hello.subtree at once. Reports go up through `link`.
  SubtreeRelay(const SessionHello& hello, HeadLink& link);
  ~SubtreeRelay();  // ends every connection still open
  SubtreeRelay(const SubtreeRelay&) = delete;
  SubtreeRelay& operator=(const SubtreeRelay&) = delete;

  // Thread-safe: one control line to every agent of the subtree.
  void send_all(const std::string& line);
  // Thread-safe: end of input for every agent of the subtree (they stop, or never start).
  void close_all();
  // Blocks until the remote shell of every host it started has exited, or the deadline.
  bool wait_all_ended(Deadline deadline);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun
