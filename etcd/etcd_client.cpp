#include "etcd/etcd_client.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <optional>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/strings.hpp"
#include "common/libcrypto.hpp"

namespace ddprun {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;
using boost::system::error_code;

namespace {

// After every endpoint failed once in a row, wait this long before the next round of tries.
constexpr auto kRetryPause = std::chrono::milliseconds(100);
constexpr std::size_t kMaxAnswer = 64 << 20;

// gRPC status codes etcd answers with where another member (or the same one, a moment later)
// can serve the request: UNAVAILABLE (no leader, stopping) and DEADLINE_EXCEEDED (request
// timed out waiting for the leader).
constexpr int kGrpcDeadlineExceeded = 4;
constexpr int kGrpcUnavailable = 14;

// A failure that the next endpoint may not have, thrown inside one attempt and caught by the
// failover loop, which keeps each endpoint's last one to explain a timeout.
class Transient : public std::runtime_error {
 public:
  enum class Kind {
    kUnreachable,  // the member could not be resolved or connected to
    kUnserved,     // it is up but did not serve the request: no leader, a request that timed
                   // out waiting for one, or no answer at all
    kBroken,       // anything else: a connection lost, a stream that broke or ended
  };
  Transient(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

bool retryable(int code) { return code == kGrpcUnavailable || code == kGrpcDeadlineExceeded; }

// An etcd error answer that another member (or the same, a moment later) may serve: no leader,
// a leader changing, or a request that timed out waiting for one. A timeout that saw only these
// (or silence) reports a cluster without quorum.
Transient unserved(const EtcdError& error) {
  return Transient(Transient::Kind::kUnserved, error.what());
}

// etcd's error object {"error": ..., "code": N, "message": ...} (or a stream's {"error": {...}}).
EtcdError error_from(const json& body) {
  const json& e = body.contains("error") && body["error"].is_object() ? body["error"] : body;
  // Unary answers carry "code"; errors inside a stream (watch, keep-alive) "grpc_code".
  const int code = e.contains("grpc_code") && e["grpc_code"].is_number_integer()
                       ? e["grpc_code"].get<int>()
                       : e.value("code", 2);
  std::string message = e.value("message", std::string());
  if (message.empty() && e.contains("error") && e["error"].is_string()) {
    message = e["error"].get<std::string>();
  }
  return EtcdError(code, message.empty() ? e.dump() : message);
}

}  // namespace

std::string EtcdEndpoint::text() const { return format_host_port(host, port); }

std::vector<EtcdEndpoint> parse_etcd_endpoints(const std::string& text, const std::string& label) {
  std::vector<EtcdEndpoint> endpoints;
  for (auto part : split(text, ',')) {
    std::string item(trim(part));
    if (item.empty()) continue;
    if (item.starts_with("https://")) {
      throw ConfigError(fmt::format(
          "{}={}: https endpoints are not supported (ddprun speaks plain HTTP to etcd; reach it "
          "over a trusted network or through a local TLS proxy)",
          label, text));
    }
    if (item.starts_with("http://")) item = item.substr(7);
    while (!item.empty() && item.back() == '/') item.pop_back();
    auto hp = parse_host_port(item, label);
    endpoints.push_back(EtcdEndpoint{hp.host, hp.port.value_or(2379)});
  }
  if (endpoints.empty()) {
    throw ConfigError(fmt::format("{}={}: expected etcd endpoints HOST[:PORT],... ", label, text));
  }
  return endpoints;
}

EtcdError::EtcdError(int code, const std::string& message)
    : RendezvousError(fmt::format("etcd: {} (code {})", message, code)), code_(code) {}

std::string base64_encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = libcrypto().evp_encode_block(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string base64_decode(const std::string& text) {
  if (text.empty()) return {};
  if (text.size() % 4 != 0) throw ProtocolError(fmt::format("etcd: bad base64 '{}'", text));
  std::string out(3 * (text.size() / 4), '\0');
  const int n = libcrypto().evp_decode_block(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) throw ProtocolError(fmt::format("etcd: bad base64 '{}'", text));
  // EVP_DecodeBlock counts the padding as zero bytes.
  std::size_t size = static_cast<std::size_t>(n);
  for (auto it = text.rbegin(); it != text.rend() && *it == '=' && size > 0; ++it) --size;
  out.resize(size);
  return out;
}

std::int64_t json_int(const json& object, const char* field) {
  auto it = object.find(field);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    if (auto v = parse_int(it->get<std::string>())) return *v;
  }
  throw ProtocolError(fmt::format("etcd: field '{}' is not an integer: {}", field, it->dump()));
}

EtcdKv parse_kv(const json& kv) {
  EtcdKv out;
  out.key = base64_decode(kv.value("key", std::string()));
  out.value = base64_decode(kv.value("value", std::string()));
  out.create_revision = json_int(kv, "create_revision");
  out.mod_revision = json_int(kv, "mod_revision");
  out.version = json_int(kv, "version");
  out.lease = json_int(kv, "lease");
  return out;
}

std::string prefix_range_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

json prefix_range(const std::string& prefix) {
  return json{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_range_end(prefix))}};
}

json key_only(const std::string& key) { return json{{"key", base64_encode(key)}}; }

json put_request(const std::string& key, const std::string& value, std::int64_t lease) {
  json put{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return put;
}

class EtcdClient::Impl {
 public:
  Impl(std::vector<EtcdEndpoint> endpoints, std::chrono::milliseconds attempt_timeout)
      : endpoints_(std::move(endpoints)),
        attempt_timeout_(attempt_timeout),
        last_errors_(endpoints_.size()) {}

  json call(const std::string& path, const json& body, Deadline deadline) {
    const auto started = Clock::now();
    const std::string payload = body.dump();
    if (spdlog::should_log(spdlog::level::trace)) {
      spdlog::trace("etcd: {} ({} bytes)", path, payload.size());
    }
    return with_failover(path, started, deadline, [&](Deadline attempt) {
      return call_once(path, payload, attempt);
    });
  }

  // A watch of `key` alone (`range_end` empty) or of [key, range_end).
  void watch(const std::string& key, const std::string& range_end, std::int64_t start_revision,
             Deadline deadline, const std::function<bool(const EtcdEvent&)>& on_event) {
    const auto started = Clock::now();
    std::int64_t next = start_revision;
    if (spdlog::should_log(spdlog::level::trace)) {
      spdlog::trace("etcd: /v3/watch {}{}", key, range_end.empty() ? "" : "*");
    }
    with_failover("/v3/watch", started, deadline, [&](Deadline) {
      watch_once(key, range_end, &next, deadline, on_event);
      return json();
    });
  }

  void interrupt() {
    if (!interrupted_.exchange(true)) io_.stop();
  }

  std::string describe() const {
    std::vector<std::string> parts;
    for (const auto& e : endpoints_) parts.push_back(e.text());
    return fmt::format("{}", fmt::join(parts, ","));
  }

 private:
  // Tries `attempt` on the endpoint in use, moving on to the next endpoint on a Transient
  // failure, until the deadline.
  template <class Attempt>
  json with_failover(const std::string& what, Clock::time_point started, Deadline deadline,
                     Attempt&& attempt) {
    std::size_t failures_in_a_row = 0;
    while (true) {
      throw_if_interrupted();
      if (deadline.expired()) throw timeout(what, started);
      try {
        return attempt(deadline.min(Deadline::after(attempt_timeout_)));
      } catch (const Transient& t) {
        last_errors_[current_] = {t.kind(), t.what()};
        conn_.reset();
        current_ = (current_ + 1) % endpoints_.size();
        if (++failures_in_a_row % endpoints_.size() == 0) {
          pause(deadline.min(Deadline::after(kRetryPause)));
        }
      }
    }
  }

  EtcdUnavailable timeout(const std::string& what, Clock::time_point started) const {
    std::vector<std::string> errors;
    for (std::size_t i = 0; i < endpoints_.size(); ++i) {
      errors.push_back(fmt::format("{}: {}", endpoints_[i].text(),
                                   last_errors_[i] ? last_errors_[i]->text : "no error"));
    }
    // A member that accepted the connection but could not serve the request (no leader, a
    // request that timed out waiting for one, or silence) is up without a quorum around it.
    const auto is = [](Transient::Kind kind) {
      return [kind](const std::optional<LastError>& e) { return e && e->kind == kind; };
    };
    const bool no_quorum =
        std::any_of(last_errors_.begin(), last_errors_.end(), is(Transient::Kind::kUnserved));
    const bool none_up =
        std::all_of(last_errors_.begin(), last_errors_.end(), is(Transient::Kind::kUnreachable));
    return EtcdUnavailable(fmt::format("etcd {}: no answer to {} within {}{} ({})", describe(), what,
                                    format_duration(Clock::now() - started),
                                    no_quorum ? "; the etcd cluster has no quorum (its members "
                                                "that are up cannot elect a leader)"
                                    : none_up ? "; no etcd member is reachable"
                                              : "",
                                    fmt::join(errors, "; ")));
  }

  void throw_if_interrupted() const {
    if (interrupted_) throw InterruptedError(fmt::format("etcd {}: interrupted", describe()));
  }

  // Runs the asynchronous operation `start` begins (its handler gets an error_code) until it
  // completes. On interrupt, `cancel` stops it and the io_context is drained before the
  // InterruptedError, so that no handler outlives this frame.
  template <class Start, class Cancel>
  error_code run(Start&& start, Cancel&& cancel) {
    std::optional<error_code> result;
    start([&result](error_code ec) { result = ec; });
    io_.restart();
    if (!interrupted_) io_.run();
    if (!result || interrupted_) {
      cancel();
      io_.restart();
      io_.run();
      throw_if_interrupted();
    }
    return *result;
  }

  void pause(Deadline until) {
    asio::steady_timer timer(io_, until.when());
    run([&](auto done) { timer.async_wait([done](error_code ec) { done(ec); }); },
        [&] { timer.cancel(); });
  }

  // A connection to the endpoint in use, made by `deadline`.
  void connect(beast::tcp_stream& stream, Deadline deadline) {
    const auto& endpoint = endpoints_[current_];
    error_code ec;
    const auto literal = asio::ip::make_address(endpoint.host, ec);
    if (!ec) {
      connect_to(stream, {asio::ip::tcp::endpoint(literal, endpoint.port)}, deadline);
      return;
    }
    // A name: resolved on each connection (DNS may move it). getaddrinfo cannot be abandoned
    // half-way, so a resolver that hangs delays the deadline by its own timeout.
    asio::ip::tcp::resolver resolver(io_);
    asio::steady_timer timer(io_, deadline.when());
    asio::ip::tcp::resolver::results_type addresses;
    ec = run(
        [&](auto done) {
          timer.async_wait([&](error_code tec) {
            if (!tec) resolver.cancel();
          });
          resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                                 [&, done](error_code rec, auto results) {
                                   timer.cancel();
                                   addresses = std::move(results);
                                   done(rec);
                                 });
        },
        [&] {
          resolver.cancel();
          timer.cancel();
        });
    if (ec) {
      throw Transient(Transient::Kind::kUnreachable,
                      fmt::format("cannot resolve {}: {}", endpoint.host, ec.message()));
    }
    std::vector<asio::ip::tcp::endpoint> candidates(addresses.begin(), addresses.end());
    connect_to(stream, candidates, deadline);
  }

  void connect_to(beast::tcp_stream& stream, const std::vector<asio::ip::tcp::endpoint>& addresses,
                  Deadline deadline) {
    stream.expires_at(deadline.when());
    auto ec = run(
        [&](auto done) {
          stream.async_connect(addresses, [done](error_code e, auto&&) { done(e); });
        },
        [&] { stream.close(); });
    if (ec) {
      throw Transient(Transient::Kind::kUnreachable,
                      fmt::format("cannot connect: {}", ec.message()));
    }
    auto& socket = stream.socket();
    socket.set_option(asio::ip::tcp::no_delay(true));
    // A watch may stay silent for an hour; a member that vanished without closing the
    // connection (power off, a cut network) is noticed by TCP keep-alive within ~15 s instead.
    socket.set_option(asio::socket_base::keep_alive(true));
    const int fd = socket.native_handle();
    const int idle = 5, interval = 2, count = 5;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  }

  http::request<http::string_body> request(const std::string& path, std::string payload) const {
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, endpoints_[current_].text());
    req.set(http::field::content_type, "application/json");
    // Ask the member to refuse (rather than queue) work it cannot do without a leader, so that
    // a member cut off from the others sends the call on to the next endpoint.
    req.set("Grpc-Metadata-hasleader", "true");
    req.keep_alive(true);
    req.body() = std::move(payload);
    req.prepare_payload();
    return req;
  }

  void send(beast::tcp_stream& stream, const std::string& path, const std::string& payload,
            Deadline deadline) {
    auto req = request(path, payload);
    stream.expires_at(deadline.when());
    auto ec = run(
        [&](auto done) { http::async_write(stream, req, [done](error_code e, std::size_t) { done(e); }); },
        [&] { stream.close(); });
    if (ec) {
      throw Transient(Transient::Kind::kBroken,
                      fmt::format("cannot send {}: {}", path, ec.message()));
    }
  }

  json call_once(const std::string& path, const std::string& payload, Deadline deadline) {
    if (!conn_) {
      // Bytes of a torn answer on the last connection must not prefix the next one's.
      buffer_.consume(buffer_.size());
      conn_.emplace(io_);
      connect(*conn_, deadline);
    }
    send(*conn_, path, payload, deadline);
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxAnswer);
    auto ec = run(
        [&](auto done) {
          http::async_read(*conn_, buffer_, parser, [done](error_code e, std::size_t) { done(e); });
        },
        [&] { conn_->close(); });
    if (ec) {
      const bool timed_out = ec == beast::error::timeout;
      throw Transient(timed_out ? Transient::Kind::kUnserved : Transient::Kind::kBroken,
                      fmt::format("{} {}", timed_out ? "no answer to" : "lost the answer to",
                                  path) +
                          (timed_out ? fmt::format(" within {}", format_duration(attempt_timeout_))
                                     : ": " + ec.message()));
    }
    auto& response = parser.get();
    if (!response.keep_alive()) conn_.reset();
    // A streamed answer (lease keep-alive) holds one JSON message per line.
    const auto& text = response.body();
    json answer = json::parse(text.substr(0, text.find('\n')), nullptr, false);
    if (answer.is_discarded()) {
      if (response.result() == http::status::service_unavailable) {
        throw Transient(Transient::Kind::kUnserved,
                        fmt::format("{} answered {}", path, response.result_int()));
      }
      throw ProtocolError(fmt::format("etcd {}: {} answered HTTP {} with a body that is not "
                                      "JSON: {}",
                                      endpoints_[current_].text(), path, response.result_int(),
                                      text.substr(0, 200)));
    }
    if (response.result() != http::status::ok || answer.contains("error")) {
      auto error = error_from(answer);
      if (retryable(error.code())) throw unserved(error);
      throw error;
    }
    if (answer.contains("result")) return answer["result"];
    return answer;
  }

  void watch_once(const std::string& key, const std::string& range_end, std::int64_t* next,
                  Deadline deadline, const std::function<bool(const EtcdEvent&)>& on_event) {
    beast::tcp_stream stream(io_);
    const auto connect_by = deadline.min(Deadline::after(attempt_timeout_));
    connect(stream, connect_by);
    json create{{"key", base64_encode(key)}, {"start_revision", *next}};
    if (!range_end.empty()) create["range_end"] = base64_encode(range_end);
    send(stream, "/v3/watch", json{{"create_request", create}}.dump(), connect_by);

    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    // The member's answers may wait as long as the watch does; etcd sends nothing while the
    // watched keys do not change.
    stream.expires_at(deadline.when());
    while (true) {
      auto ec = run(
          [&](auto done) {
            http::async_read_some(stream, buffer, parser,
                                  [done](error_code e, std::size_t) { done(e); });
          },
          [&] { stream.close(); });
      if (ec == beast::error::timeout) {
        throw TimeoutError(fmt::format("etcd {}: watching '{}' from revision {}: nothing within "
                                       "the deadline",
                                       describe(), key, *next));
      }
      if (ec) {
        throw Transient(Transient::Kind::kBroken,
                        fmt::format("watch stream broke: {}", ec.message()));
      }
      if (parser.is_header_done() && parser.get().result() != http::status::ok &&
          !parser.is_done()) {
        continue;  // read the error body whole
      }
      auto& body = parser.get().body();
      std::size_t line_end;
      while ((line_end = body.find('\n')) != std::string::npos) {
        json message = json::parse(body.substr(0, line_end), nullptr, false);
        body.erase(0, line_end + 1);
        if (message.is_discarded()) {
          throw Transient(Transient::Kind::kBroken, "watch stream sent a line that is not JSON");
        }
        if (message.contains("error")) {
          auto error = error_from(message);
          if (retryable(error.code())) throw unserved(error);
          throw error;
        }
        const json& result = message.contains("result") ? message["result"] : message;
        if (result.value("canceled", false)) {
          const auto compacted = json_int(result, "compact_revision");
          if (compacted > 0) {
            throw EtcdError(kEtcdCompacted,
                            fmt::format("watch of '{}' from revision {} canceled: compacted "
                                        "up to {}",
                                        key, *next, compacted));
          }
          throw Transient(Transient::Kind::kBroken,
                          fmt::format("watch canceled: {}", result.value("cancel_reason", "")));
        }
        for (const auto& e : result.value("events", json::array())) {
          EtcdEvent event;
          event.deleted = e.value("type", std::string()) == "DELETE";
          event.kv = parse_kv(e.at("kv"));
          *next = event.kv.mod_revision + 1;
          if (on_event(event)) return;
        }
      }
      if (parser.is_done()) {
        if (parser.get().result() != http::status::ok) {
          json answer = json::parse(body, nullptr, false);
          auto error = answer.is_discarded() ? EtcdError(kGrpcUnavailable, body) : error_from(answer);
          if (retryable(error.code())) throw unserved(error);
          throw error;
        }
        throw Transient(Transient::Kind::kBroken, "watch stream ended");
      }
    }
  }

  std::vector<EtcdEndpoint> endpoints_;
  std::chrono::milliseconds attempt_timeout_;
  struct LastError {
    Transient::Kind kind;
    std::string text;
  };
  std::vector<std::optional<LastError>> last_errors_;  // by endpoint
  std::size_t current_ = 0;
  asio::io_context io_;
  std::optional<beast::tcp_stream> conn_;
  beast::flat_buffer buffer_;
  std::atomic<bool> interrupted_{false};
};

EtcdClient::EtcdClient(std::vector<EtcdEndpoint> endpoints,
                       std::chrono::milliseconds attempt_timeout)
    : impl_(std::make_unique<Impl>(std::move(endpoints), attempt_timeout)) {}
EtcdClient::~EtcdClient() = default;

json EtcdClient::call(const std::string& path, const json& body, Deadline deadline) {
  return impl_->call(path, body, deadline);
}

void EtcdClient::watch(const std::string& key, std::int64_t start_revision, Deadline deadline,
                       const std::function<bool(const EtcdEvent&)>& on_event) {
  impl_->watch(key, "", start_revision, deadline, on_event);
}

void EtcdClient::watch_prefix(const std::string& prefix, std::int64_t start_revision,
                              Deadline deadline,
                              const std::function<bool(const EtcdEvent&)>& on_event) {
  impl_->watch(prefix, prefix_range_end(prefix), start_revision, deadline, on_event);
}

void EtcdClient::interrupt() { impl_->interrupt(); }

std::string EtcdClient::describe() const { return impl_->describe(); }

}  // namespace ddprun
