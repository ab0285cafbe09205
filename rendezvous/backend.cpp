#include "rendezvous/backend.hpp"

#include <unistd.h>

#include <thread>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/progress.hpp"
#include "common/strings.hpp"
#include "rendezvous/elastic_rendezvous.hpp"
#include "rendezvous/static_rendezvous.hpp"

namespace ddprun {

namespace asio = boost::asio;

namespace {

// Waits until `host` resolves, trying every quarter second: a name may not resolve yet when the
// agent starts (a Kubernetes headless service's record appears only once its pod is ready, on
// that pod too), and the store's host may be this node. Says so at once and then now and then;
// throws TimeoutError once `deadline` has passed. One lookup is getaddrinfo's, bounded by the
// resolver's own timeout (resolv.conf), which can carry the wait past `deadline` by that much.
void wait_until_resolvable(const std::string& host, std::uint16_t port, Deadline deadline,
                           std::chrono::milliseconds progress_interval) {
  const auto store = format_host_port(host, port);
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  ProgressClock progress(progress_interval);
  bool said = false;
  const auto started = Clock::now();
  while (true) {
    auto results = resolver.resolve(host, "0", ec);
    if (!ec && !results.empty()) {
      if (said) {
        spdlog::info("the store's address {} resolves now (after {})", store,
                     format_duration(Clock::now() - started));
      }
      return;
    }
    const auto why = ec ? ec.message() : std::string("no addresses");
    if (deadline.expired()) {
      throw TimeoutError(fmt::format("the store's address {} did not resolve within {}: {}",
                                     store, format_duration(Clock::now() - started), why));
    }
    if (!said || progress.due()) {
      spdlog::info("waiting for the store's address {} to resolve ({}); {} so far", store, why,
                   format_duration(Clock::now() - started));
      said = true;
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(250), deadline.remaining()));
  }
}

// True when `host` names an address of this machine (it can be bound).
bool is_local_address(const std::string& host) {
  asio::io_context io;
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(host, "0", ec);
  if (ec) return false;
  for (const auto& entry : results) {
    asio::ip::tcp::acceptor probe(io);
    auto endpoint = asio::ip::tcp::endpoint(entry.endpoint().address(), 0);
    probe.open(endpoint.protocol(), ec);
    if (!ec) probe.bind(endpoint, ec);
    if (!ec) return true;
  }
  return false;
}

KeepAliveTiming keep_alive_timing(const RdzvConf& conf) {
  return KeepAliveTiming{conf.keep_alive_interval, conf.keep_alive_max_attempt,
                         conf.read_timeout};
}

}  // namespace

JobStoreAddress job_store_address(const LaunchConfig& config) {
  JobStoreAddress address;
  if (config.is_etcd()) {
    EtcdStoreOptions etcd;
    etcd.endpoints = parse_etcd_endpoints(config.rdzv_endpoint, "--rdzv-endpoint");
    etcd.prefix = config.rdzv_conf.etcd_prefix;
    etcd.run_id = config.rdzv_id;
    address.etcd = std::move(etcd);
    return address;
  }
  if (config.is_static()) {
    address.tcp.host = config.master_addr;
    address.tcp.port = config.master_port;
  } else {
    const auto endpoint = parse_host_port(config.rdzv_endpoint, "--rdzv-endpoint");
    address.tcp.host = endpoint.host;
    address.tcp.port = endpoint.port.value_or(kC10dDefaultPort);
  }
  address.tcp.run_id = config.rdzv_id;
  address.tcp.secret = config.store_secret;
  return address;
}

store::StoreOpener job_store_opener(const LaunchConfig& config) {
  auto address = job_store_address(config);
  if (address.etcd) {
    return [etcd = *address.etcd](Deadline deadline) -> std::unique_ptr<store::Store> {
      return std::make_unique<EtcdStore>(etcd, deadline);
    };
  }
  return [tcp = address.tcp](Deadline deadline) -> std::unique_ptr<store::Store> {
    return std::make_unique<store::TcpStoreClient>(tcp, deadline);
  };
}

RendezvousBackend::RendezvousBackend(const LaunchConfig& config, const std::string& host,
                                     Deadline deadline) {
  auto address = job_store_address(config);
  client_options_ = address.tcp;
  auto serve = [&](const std::string& addr, std::uint16_t port) {
    store::StoreServerOptions options;
    options.host = addr;
    options.port = port;
    options.read_timeout = config.rdzv_conf.read_timeout;
    options.secret = config.store_secret;
    options.served_for = config.rdzv_id;
    server_ = std::make_unique<store::TcpStoreServer>(options);
    server_->start();
    client_options_.port = server_->port();
  };

  if (address.etcd) {
    etcd_ = *address.etcd;
    // The session first: it removes what a killed job with this run id left and registers this
    // agent, after which nobody removes the run's keys until the job ends. Only then does the
    // mirror read them, so that it never serves an old job's news.
    session_ = std::make_unique<EtcdSession>(*etcd_, fmt::format("{}:{}", host, getpid()),
                                             keep_alive_timing(config.rdzv_conf), deadline);
    // This agent's stores wait for the rounds' news through one watch (EtcdMirror).
    etcd_->mirror = std::make_shared<EtcdMirror>(etcd_->endpoints, etcd_->run_prefix() + kNewsPrefix);
    client_ = std::make_unique<EtcdStore>(*etcd_, deadline);
    handler_ = make_rendezvous_handler(config, *client_, opener(), host, session_.get());
    return;
  }
  // Whether this node serves the store depends on what the name is, and a client cannot reach
  // it before it resolves.
  if (!(config.is_static() && config.max_nodes == 1)) {
    wait_until_resolvable(client_options_.host, client_options_.port, deadline,
                          config.progress_interval);
  }
  if (config.is_static()) {
    if (config.max_nodes == 1) {
      // One node: no other agent will ever connect, and the workers make a store of their own
      // at MASTER_PORT. The store is this agent's memory: no socket, no thread to serve it.
      local_ = std::make_unique<store::MemoryStore>(std::make_shared<store::SharedStoreState>(),
                                             client_options_.run_id, "this agent's memory");
    } else if (config.node_rank == 0 && config.rdzv_conf.is_host.value_or(true)) {
      // Node 0 serves the store unless told that another process does (is_host=0: a
      // ddprun-store). It never joins a store it finds on the port by itself: that may be
      // another job's, and joining it would merge the two.
      try {
        serve(config.master_addr, config.master_port);
      } catch (const ConnectionError& e) {
        throw ConnectionError(fmt::format("{} (node 0 serves the store of a static job; when a "
                                          "ddprun-store serves it there, give node 0 "
                                          "--rdzv-conf=is_host=0)",
                                          e.what()));
      }
    }
  } else if (config.rdzv_conf.is_host.value_or(is_local_address(client_options_.host))) {
    try {
      serve(client_options_.host, client_options_.port);
    } catch (const ConnectionError& e) {
      if (config.rdzv_conf.is_host.value_or(false)) throw;
      spdlog::info("store at {} is served by another process ({}); joining it as a client",
                   format_host_port(client_options_.host, client_options_.port), e.what());
    }
  }
  // The agent that serves the store uses it in-process; everyone else connects over TCP.
  if (local_) {
    client_ = local_->connect();
  } else if (server_) {
    client_ = server_->local_client(client_options_.run_id);
  } else {
    client_ = std::make_unique<store::TcpStoreClient>(client_options_, deadline);
  }

  handler_ = make_rendezvous_handler(config, *client_, opener(), host);
}

std::unique_ptr<RendezvousHandler> make_rendezvous_handler(
    const LaunchConfig& config, store::Store& store, store::StoreOpener open_store, const std::string& host,
    ElasticRendezvous::KeepAliveSource* keep_alive) {
  const auto timing = keep_alive_timing(config.rdzv_conf);
  if (config.is_static()) {
    StaticRendezvousOptions o;
    o.nnodes = config.max_nodes;
    o.node_rank = config.node_rank;
    o.self = NodeInfo{host, config.nproc_per_node, static_cast<int>(getpid())};
    o.join_timeout = config.rdzv_conf.join_timeout;
    o.progress_interval = config.progress_interval;
    o.settings = agreed_settings(config);
    // As RendezvousBackend decides: node 0 serves a static job's store unless told otherwise.
    o.serves_store = config.node_rank == 0 && config.rdzv_conf.is_host.value_or(true);
    return std::make_unique<StaticRendezvous>(store, std::move(open_store), o, config.master_addr,
                                              timing);
  }
  ElasticRendezvousOptions o;
  o.min_nodes = config.min_nodes;
  o.max_nodes = config.max_nodes;
  o.join_timeout = config.rdzv_conf.join_timeout;
  o.last_call_timeout = config.rdzv_conf.last_call_timeout;
  o.read_timeout = config.rdzv_conf.read_timeout;
  o.progress_interval = config.progress_interval;
  // A closer reads the descriptors for up to 5 s; past that and a keep-alive's silence, the
  // ring would have named it dead too.
  o.claim_stale_after =
      std::min<std::chrono::milliseconds>(o.read_timeout, std::chrono::seconds(5)) +
      timing.interval * timing.max_attempts;
  o.settings = agreed_settings(config);
  ElasticNode self;
  self.id = fmt::format("{}:{}", host, getpid());
  self.host = host;
  self.nproc = config.nproc_per_node;
  return std::make_unique<ElasticRendezvous>(store, std::move(open_store), o, self, timing,
                                             config.max_restarts, keep_alive);
}

RendezvousBackend::~RendezvousBackend() {
  handler_.reset();
  client_.reset();
  session_.reset();
  server_.reset();
  local_.reset();
}

std::optional<std::uint64_t> RendezvousBackend::store_requests_served() const {
  if (!server_) return std::nullopt;
  return server_->requests_served();
}

store::StoreOpener RendezvousBackend::opener() const {
  if (etcd_) {
    return [options = *etcd_](Deadline deadline) -> std::unique_ptr<store::Store> {
      return std::make_unique<EtcdStore>(options, deadline);
    };
  }
  if (local_) {
    return [local = local_.get()](Deadline) -> std::unique_ptr<store::Store> { return local->connect(); };
  }
  if (server_) {
    return [server = server_.get(), run_id = client_options_.run_id](Deadline) {
      return server->local_client(run_id);
    };
  }
  return [options = client_options_](Deadline deadline) -> std::unique_ptr<store::Store> {
    return std::make_unique<store::TcpStoreClient>(options, deadline);
  };
}

std::string RendezvousBackend::describe() const {
  if (etcd_) return client_->describe();
  if (local_) return "store in this agent's memory (one node)";
  return fmt::format("store {}, {}{}",
                     format_host_port(client_options_.host, client_options_.port),
                     server_ ? "served by this agent" : "joined as a client",
                     client_options_.secret.empty() ? "" : ", with the job's secret");
}

}  // namespace ddprun
