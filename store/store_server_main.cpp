// ddprun-store: the rendezvous store on a host of its own, for users who keep it apart from the
// agents. Serves until SIGINT or SIGTERM.

#include <csignal>
#include <cstdlib>
#include <map>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/launch_config.hpp"
#include "common/limits.hpp"
#include "common/logging.hpp"
#include "common/version.hpp"
#include "store/store_auth.hpp"
#include "store/tcp_store_server.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ddprun-store: the TCP key-value store that ddprun agents rendezvous through",
               "ddprun-store"};
  app.set_version_flag("--version", "ddprun-store " + ddprun::ddprun_version(),
                       "Print the version and exit");
  ddprun::store::StoreServerOptions options;
  options.port = ddprun::kC10dDefaultPort;
  double read_timeout_s = 30;
  std::string log_level = "info";
  std::string token_file;
  app.add_option("--host", options.host, "Address to listen on, exactly (e.g. 10.0.0.1, ::1)")
      ->capture_default_str();
  app.add_option("--port", options.port, "Port to listen on (0: any free port)")
      ->capture_default_str();
  app.add_option("--read-timeout", read_timeout_s,
                 "Seconds a frame may take to arrive whole, and the handshake after connecting")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-connections", options.max_connections,
                 "Connections open at once; at the limit, ones still in their handshake make "
                 "room (0: the open-files limit less 64)")
      ->capture_default_str();
  std::size_t max_buffered_mib = options.max_buffered >> 20;
  app.add_option("--max-buffered-mib", max_buffered_mib,
                 "MiB of unfinished requests held over all connections")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--token-file", token_file,
                 "The job's secret: clients must prove they know it [$DDPRUN_TOKEN; none]");
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    ddprun::setup_logging("ddprun-store", log_level);
    ddprun::raise_open_files_limit();
    options.read_timeout =
        std::chrono::milliseconds(static_cast<std::int64_t>(read_timeout_s * 1000));
    options.max_buffered = max_buffered_mib << 20;
    std::vector<std::string> warnings;
    std::map<std::string, std::string> env;
    if (const char* value = std::getenv(ddprun::store::kTokenEnv)) env[ddprun::store::kTokenEnv] = value;
    options.secret = ddprun::store::read_secret(token_file, "--token-file", env, warnings);
    for (const auto& warning : warnings) spdlog::warn("{}", warning);
    ddprun::store::TcpStoreServer server(options);
    // The server thread serves; this thread waits for the signal that ends it.
    boost::asio::io_context signals_io;
    boost::asio::signal_set signals(signals_io, SIGINT, SIGTERM);
    int received = 0;
    signals.async_wait([&](const boost::system::error_code& ec, int signo) {
      if (!ec) received = signo;
    });
    server.start();
    signals_io.run();
    spdlog::info("store: {} received, shutting down", strsignal(received));
    server.stop();
    return 0;
  } catch (const ddprun::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const ddprun::ConnectionError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const ddprun::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
