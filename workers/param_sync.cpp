#include "workers/param_sync.hpp"

#include <bit>

#include <fmt/format.h>

#include "workers/worker_error.hpp"

namespace ddprun::workers {

ParamFingerprint fingerprint(const torch::nn::Module& module) {
  ParamFingerprint f;
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const auto& p : module.parameters()) {
    at::Tensor cpu = p.detach().to(at::kCPU).contiguous();
    f.checksum += cpu.to(at::kDouble).sum().item<double>();
    const auto* bytes = static_cast<const unsigned char*>(cpu.data_ptr());
    const std::size_t n = static_cast<std::size_t>(cpu.numel()) * cpu.element_size();
    for (std::size_t i = 0; i < n; ++i) {
      hash ^= bytes[i];
      hash *= 0x100000001b3ULL;
    }
  }
  f.digest = hash;
  return f;
}

ParamFingerprint verify_in_sync(const torch::nn::Module& module, Distributed& dist) {
  const ParamFingerprint mine = fingerprint(module);
  const auto all = dist.allgather_int64(
      {std::bit_cast<std::int64_t>(mine.checksum), std::bit_cast<std::int64_t>(mine.digest)});
  bool same = true;
  std::string listing;
  for (std::size_t r = 0; r < all.size(); ++r) {
    same = same && all[r] == all[0];
    listing += fmt::format("\n  rank {}: param_checksum {:.17g}, param_digest {:016x}", r,
                           std::bit_cast<double>(all[r][0]), std::bit_cast<std::uint64_t>(all[r][1]));
  }
  if (!same) {
    throw OutOfSyncError(fmt::format("parameters differ between ranks ({}):{}", error_context(),
                                     listing));
  }
  return mine;
}

}  // namespace ddprun::workers
