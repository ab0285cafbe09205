#pragma once
// The one exception hierarchy of ddprun. Synchronous code throws these; only main() turns
// them into exit codes. Messages say what failed, where, and how long it waited.

#include <stdexcept>
#include <string>

namespace ddprun {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A deadline passed before the operation completed.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer could not be reached, or the connection broke.
class ConnectionError : public Error {
 public:
  using Error::Error;
};

// The store and a client do not share the job's secret (one has none, or they differ).
class AuthError : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

// A peer sent bytes that do not follow the wire protocol.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// The user's configuration (flags, environment) is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// The rendezvous could not complete (duplicate node rank, mismatched configuration, closed run).
class RendezvousError : public Error {
 public:
  using Error::Error;
};

// A blocking call was interrupted on purpose (a signal asked the agent to stop).
class InterruptedError : public Error {
 public:
  using Error::Error;
};

// errno as text, e.g. "Connection refused (errno 111)".
std::string errno_message(int err);

}  // namespace ddprun
