#pragma once
// Figure 5's comparison: c10d's TCPStore from libtorch (Debian's python3-torch 1.13), its
// server in a process of its own, its clients driven exactly like ddprun's. Only built when
// libtorch is found.

#include <cstdint>

#include "bench/store_load.hpp"

namespace ddprun::bench {

// Clients of c10d::TCPStore; the server is `self --serve-c10d --port P`.
StoreSubject c10d_subject(const std::string& self);

// Serves a c10d TCPStore on 127.0.0.1:port until SIGTERM or SIGINT.
void serve_c10d(std::uint16_t port);

}  // namespace ddprun::bench
