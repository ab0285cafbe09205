#pragma once
// --hosts=slurm: ddprun goes to every node of the allocation once, by sbcast, on the first
// host's request; the hosts that ask meanwhile wait for it, and each then gets only the name of
// the file on its node. When sbcast is missing, fails or runs past its deadline, every host
// that asked (and every later one) gets the bytes on its own session instead.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "cluster/remote_session.hpp"
#include "cluster/staging.hpp"
#include "common/deadline.hpp"
#include "process/exit_watch.hpp"

namespace ddprun {

class SlurmBroadcast {
 public:
  // `self`: this executable, the file sbcast sends; `binary`: its bytes, for the sessions.
  // sbcast runs on `io`'s thread until `deadline` at the latest: early enough that the hosts
  // can still get the bytes on their sessions before the command gives up on them.
  SlurmBroadcast(boost::asio::io_context& io, std::string self,
                 std::shared_ptr<const StagedBinary> binary, Deadline deadline);
  ~SlurmBroadcast();
  SlurmBroadcast(const SlurmBroadcast&) = delete;
  SlurmBroadcast& operator=(const SlurmBroadcast&) = delete;

  // A host asks for the binary: `ready` gets the copy to use, at once or once sbcast ended.
  void request(const RemoteSession::BinaryReady& ready);
  // Every host runs ddprun: the copies in memory are not needed any more.
  void release();
  // Ends an sbcast still running (nobody waits for it any more, and it would keep the
  // io_context running).
  void cancel();

 private:
  enum class State { kNotYet, kRunning, kDone, kFailed };
  void start();
  void done(bool ok, const std::string& why_not);

  boost::asio::io_context& io_;
  std::string self_;
  std::shared_ptr<const StagedBinary> binary_;
  std::shared_ptr<const StagedBinary> broadcast_;  // binary_, with the nodes' file
  Deadline deadline_;
  bool timed_out_ = false;
  State state_ = State::kNotYet;
  std::vector<RemoteSession::BinaryReady> waiting_;
  std::unique_ptr<ExitWatch> exit_watch_;
  boost::asio::steady_timer timer_;
  pid_t pid_ = -1;
  Clock::time_point started_;
};

}  // namespace ddprun
