#pragma once
// A diagnostic for figure 5, not a product: a minimal client of ddprun's store protocol (the
// same store/protocol.hpp codec) on a plain blocking socket, one send and one or two
// recv calls per request, no io_context. Measured next to TcpStoreClient it shows how much of
// the figure is the client library and how much the server.

#include "bench/store_load.hpp"

namespace ddprun::bench {

StoreSubject lean_subject(const std::string& store_binary);

}  // namespace ddprun::bench
