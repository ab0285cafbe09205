#include "testing/etcd_cluster.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "etcd/etcd_client.hpp"

namespace ddprun::test {

using namespace std::chrono_literals;

std::string etcd_binary() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return {};
}

void skip_unless_etcd() {
  if (!etcd_binary().empty()) return;
  std::fprintf(stderr, "SKIPPED: etcd is not installed (scripts/install-deps.sh --tests installs Debian's "
                       "etcd-server)\n");
  std::exit(77);
}

EtcdCluster::EtcdCluster(int members) {
  // The ports are picked free and then handed to etcd: in between another process may take
  // one (tests run in parallel), and that member exits at once with "address already in use".
  // Then every member starts again on new ports, a few times.
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    const auto failure = start(members);
    if (failure.empty()) return;
    for (int i = 0; i < size(); ++i) {
      if (alive(i)) kill(i);
    }
    if (attempt == kAttempts || failure.find("address already in use") == std::string::npos) {
      throw std::runtime_error(failure);
    }
  }
}

std::string EtcdCluster::start(int members) {
  client_ports_.clear();
  peer_ports_.clear();
  members_.clear();
  std::vector<std::string> peers;
  for (int i = 0; i < members; ++i) {
    client_ports_.push_back(free_port());
    peer_ports_.push_back(free_port());
    peers.push_back(fmt::format("m{}=http://127.0.0.1:{}", i, peer_ports_.back()));
  }
  const std::string token = fmt::format("ddprun-test-{}", getpid());
  for (int i = 0; i < members; ++i) {
    const auto data = dir_.file(fmt::format("m{}", i));
    std::filesystem::remove_all(data);  // a failed start's
    const auto client = fmt::format("http://127.0.0.1:{}", client_ports_[i]);
    const auto peer = fmt::format("http://127.0.0.1:{}", peer_ports_[i]);
    SpawnSpec spec;
    spec.argv = {etcd_binary(), "--name", fmt::format("m{}", i), "--data-dir", data,
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", fmt::format("{}", fmt::join(peers, ",")),
                 "--initial-cluster-state", "new", "--initial-cluster-token", token};
    spec.output = dir_.file(fmt::format("m{}.log", i));
    members_.push_back(std::make_unique<Child>(spec));
  }
  for (int i = 0; i < members; ++i) {
    EtcdClient client({EtcdEndpoint{"127.0.0.1", client_ports_[static_cast<std::size_t>(i)]}});
    int exited = -1;  // a member that ended while the others were awaited
    const bool healthy = wait_until(
        [&] {
          for (int m = 0; m < members; ++m) {
            auto& member = members_[static_cast<std::size_t>(m)];
            if (member && member->wait_for(std::chrono::milliseconds(0))) {
              member.reset();
              exited = m;
              return true;
            }
          }
          try {
            // Asked with "has leader" metadata: answers once the member knows its leader.
            client.call("/v3/maintenance/status", nlohmann::json::object(),
                        Deadline::after(200ms));
            return true;
          } catch (const Error&) {
            return false;
          }
        },
        60s);
    if (exited >= 0) {
      return fmt::format("etcd member m{} exited while starting:\n{}", exited, log_tail(exited));
    }
    if (!healthy) {
      return fmt::format("etcd member m{} did not become healthy within 60 s:\n{}", i,
                         log_tail(i));
    }
  }
  return {};
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) {
    if (alive(i)) kill(i);
  }
}

std::string EtcdCluster::endpoint(int member) const {
  return fmt::format("127.0.0.1:{}", client_ports_[static_cast<std::size_t>(member)]);
}

std::string EtcdCluster::endpoints_leader_first() const {
  const int first = leader();
  if (first < 0) throw std::runtime_error("etcd: no member reports a leader");
  std::string out = endpoint(first);
  for (int i = 0; i < size(); ++i) {
    if (i != first) out += "," + endpoint(i);
  }
  return out;
}

double EtcdCluster::metric(int member, const std::string& series) const {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  try {
    asio::io_context io;
    asio::ip::tcp::socket socket(io);
    socket.connect({asio::ip::make_address("127.0.0.1"),
                    client_ports_[static_cast<std::size_t>(member)]});
    http::request<http::empty_body> request{http::verb::get, "/metrics", 11};
    request.set(http::field::host, endpoint(member));
    http::write(socket, request);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(socket, buffer, response);
    const std::string line = "\n" + series + " ";
    const auto at = response.body().find(line);
    if (at == std::string::npos) return -1;
    return std::atof(response.body().c_str() + at + line.size());
  } catch (const std::exception&) {
    return -1;
  }
}

int EtcdCluster::watchers(int member) const {
  return static_cast<int>(metric(member, "etcd_debugging_mvcc_watcher_total"));
}

int EtcdCluster::watch_streams_started(int member) const {
  return static_cast<int>(metric(
      member, "grpc_server_started_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\","
              "grpc_type=\"bidi_stream\"}"));
}

std::string EtcdCluster::endpoints() const {
  std::vector<std::string> all;
  for (int i = 0; i < size(); ++i) all.push_back(endpoint(i));
  return fmt::format("{}", fmt::join(all, ","));
}

int EtcdCluster::leader() const {
  // Every member's id, then the leader's id as a live member reports it.
  std::vector<std::string> ids(static_cast<std::size_t>(size()));
  std::string leader_id;
  for (int i = 0; i < size(); ++i) {
    if (!alive(i)) continue;
    try {
      EtcdClient client({EtcdEndpoint{"127.0.0.1", client_ports_[static_cast<std::size_t>(i)]}});
      auto status = client.call("/v3/maintenance/status", nlohmann::json::object(),
                                Deadline::after(2s));
      ids[static_cast<std::size_t>(i)] = status.at("header").at("member_id").get<std::string>();
      leader_id = status.value("leader", std::string());
    } catch (const Error&) {
    }
  }
  for (int i = 0; i < size(); ++i) {
    if (!leader_id.empty() && ids[static_cast<std::size_t>(i)] == leader_id) return i;
  }
  return -1;
}

void EtcdCluster::kill(int member) {
  auto& child = members_[static_cast<std::size_t>(member)];
  if (!child) return;
  child->signal(SIGKILL);
  child->wait(30s);
  child.reset();
}

std::string EtcdCluster::log_tail(int member) const {
  auto lines = read_lines(dir_.file(fmt::format("m{}.log", member)));
  std::string out;
  for (std::size_t i = lines.size() > 20 ? lines.size() - 20 : 0; i < lines.size(); ++i) {
    out += lines[i] + "\n";
  }
  return out;
}

}  // namespace ddprun::test
