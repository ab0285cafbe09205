// ddprun: the per-node agent, a native torchrun. main() only wires the parts together: argv to
// LaunchConfig, signals, the store (hosted on node 0), the process runner, the agent; and the
// agent's result to an exit code.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "agent/elastic_agent.hpp"
#include "agent/failure.hpp"
#include "agent/orphan_guard.hpp"
#include "agent/posix_process_runner.hpp"
#include "common/error.hpp"
#include "common/limits.hpp"
#include "common/logging.hpp"
#include "common/strings.hpp"
#include "launcher/cli.hpp"
#include "launcher/config_summary.hpp"
#include "rendezvous/tcp_store_client.hpp"
#include "rendezvous/tcp_store_server.hpp"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

// The agent the signal thread reports to. The mutex keeps it alive while on_signal runs: main
// clears it under the same lock before the agent goes away.
std::mutex g_agent_mutex;
ElasticAgent* g_agent = nullptr;
bool g_agent_done = false;  // the run is over: later signals are noted, not acted on

// Signals are blocked in every thread and taken here with sigwait, so they are handled from the
// first instant (before the rendezvous) and never interrupt a system call elsewhere.
void start_signal_thread(const std::vector<int>& handled) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : handled) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    while (true) {
      int signo = 0;
      if (sigwait(&set, &signo) != 0) continue;
      std::lock_guard lock(g_agent_mutex);
      if (g_agent) {
        g_agent->on_signal(signo);
      } else if (g_agent_done) {
        spdlog::info("received {} while shutting down; already stopping", signal_name(signo));
      } else {
        // No workers exist yet and nothing needs saying: leave at once.
        std::fprintf(stderr, "[ddprun] received %s before the agent started; exiting\n",
                     signal_name(signo).c_str());
        std::_Exit(128 + signo);
      }
    }
  }).detach();
}

std::string this_host(const LaunchConfig& config) {
  if (!config.local_addr.empty()) return config.local_addr;
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  return name;
}

// A port that is free on `host` now; rank 0's init_process_group binds it moments later.
int reserve_port(const std::string& host) {
  namespace asio = boost::asio;
  asio::io_context io;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(host, "0", ec);
    if (ec || results.empty()) {
      throw ConnectionError(fmt::format("cannot resolve master address '{}': {}", host,
                                        ec ? ec.message() : "no addresses"));
    }
    address = results.begin()->endpoint().address();
  }
  asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(address, 0));
  return acceptor.local_endpoint().port();
}

// True when `host` names an address of this machine (it can be bound).
bool is_local_address(const std::string& host) {
  namespace asio = boost::asio;
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

std::string make_log_dir(const LaunchConfig& config) {
  fs::path base = config.log_dir;
  if (base.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "torchelastic_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      throw Error(fmt::format("cannot create a log directory {}: {}", tmpl,
                              errno_message(errno)));
    }
    base = tmpl;
  }
  std::random_device rd;
  auto dir = base / fmt::format("{}_{:06x}", config.rdzv_id, rd() & 0xffffff);
  fs::create_directories(dir);
  return dir.string();
}

int run(const LaunchConfig& config, const std::vector<std::string>& notes) {
  // Before any thread: the guardian is forked from a single-threaded process.
  OrphanGuard guard;
  signal(SIGPIPE, SIG_IGN);
  raise_open_files_limit();
  start_signal_thread(config.signals_to_handle.empty()
                          ? std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}
                          : config.signals_to_handle);

  for (const auto& note : notes) spdlog::info("{}", note);
  spdlog::info("ddprun configuration:\n{}", describe(config));
  if (!config.is_static() && !config.standalone && config.node_rank != 0) {
    spdlog::info("--node-rank is ignored with --rdzv-backend=c10d: the rendezvous assigns ranks");
  }
  if (config.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS")) {
    spdlog::info("OMP_NUM_THREADS is not set: setting it to 1 for each worker to avoid "
                 "overloading the node; tune it for best performance");
  }

  const auto host = this_host(config);
  const auto join_deadline = Deadline::after(config.rdzv_conf.join_timeout);
  LaunchConfig effective = config;
  StoreClientOptions client_options;
  client_options.run_id = config.rdzv_id;
  std::unique_ptr<TcpStoreServer> server;
  auto serve = [&](const std::string& addr, std::uint16_t port) {
    StoreServerOptions options;
    options.host = addr;
    options.port = port;
    options.read_timeout = config.rdzv_conf.read_timeout;
    server = std::make_unique<TcpStoreServer>(options);
    server->start();
    client_options.port = server->port();
  };

  if (config.standalone) {
    // One node: the static path with the store on a free local port.
    client_options.host = "127.0.0.1";
    serve(client_options.host, 0);
    effective.rdzv_backend = "static";
    effective.master_addr = "127.0.0.1";
    effective.master_port = client_options.port;
    effective.max_nodes = effective.min_nodes = 1;
    effective.node_rank = 0;
  } else if (config.is_static()) {
    client_options.host = config.master_addr;
    client_options.port = config.master_port;
    if (config.node_rank == 0) serve(config.master_addr, config.master_port);
  } else {
    auto endpoint = parse_host_port(config.rdzv_endpoint, "--rdzv-endpoint");
    client_options.host = endpoint.host;
    client_options.port = endpoint.port.value_or(29400);
    // The agent on the endpoint's host serves the store (is_host forces the choice); when
    // several agents share that host, the first to bind serves and the others are clients.
    const bool try_host = config.rdzv_conf.is_host.value_or(is_local_address(endpoint.host));
    if (try_host) {
      try {
        serve(endpoint.host, client_options.port);
      } catch (const ConnectionError& e) {
        if (config.rdzv_conf.is_host.value_or(false)) throw;
        spdlog::info("store at {} is served by another process; joining it as a client",
                     format_host_port(client_options.host, client_options.port));
      }
    }
  }

  TcpStoreClient store(client_options, join_deadline);
  PosixProcessRunner runner(&guard);
  AgentContext ctx;
  ctx.host = host;
  ctx.store = &store;
  ctx.open_store = [client_options](Deadline deadline) {
    return std::make_unique<TcpStoreClient>(client_options, deadline);
  };
  ctx.runner = &runner;
  // The workers' store lives on the master node: node 0 (static), or whichever node the round
  // made group rank 0 (elastic), which advertises its own address.
  ctx.reserve_master_port = [addr = effective.is_static() ? effective.master_addr : host] {
    return reserve_port(addr);
  };
  ctx.hosts_store = server != nullptr;
  ctx.log_dir = make_log_dir(effective);
  ctx.base_env = current_environment();
  EventLog events = config.events_file.empty() ? EventLog() : EventLog(config.events_file);
  ctx.events = &events;

  ElasticAgent agent(effective, std::move(ctx));
  {
    std::lock_guard lock(g_agent_mutex);
    g_agent = &agent;
  }
  RunResult result;
  try {
    result = agent.run();
  } catch (...) {
    std::lock_guard lock(g_agent_mutex);
    g_agent = nullptr;
    g_agent_done = true;
    throw;
  }
  {
    std::lock_guard lock(g_agent_mutex);
    g_agent = nullptr;
    g_agent_done = true;
  }

  if (result.exit_code == 0) {
    spdlog::info("job finished: {} ({} restart{})", result.reason, result.restarts,
                 result.restarts == 1 ? "" : "s");
  } else {
    spdlog::error("job failed (exit code {}): {}", result.exit_code, result.reason);
  }
  return result.exit_code;
}

}  // namespace
}  // namespace ddprun

int main(int argc, char** argv) {
  using namespace ddprun;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto outcome = parse_command_line(args, current_environment());
  if (!outcome.config) {
    std::fprintf(outcome.exit_code == 0 ? stdout : stderr, "%s\n", outcome.message.c_str());
    return outcome.exit_code;
  }
  try {
    setup_logging("ddprun", outcome.config->log_level);
    int code = run(*outcome.config, outcome.notes);
    spdlog::shutdown();
    return code;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "ddprun: %s\n", e.what());
    return kExitUsage;
  } catch (const ConnectionError& e) {
    spdlog::error("{}", e.what());
    return kExitRendezvous;
  } catch (const TimeoutError& e) {
    spdlog::error("{}", e.what());
    return kExitRendezvous;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return kExitInternal;
  }
}
