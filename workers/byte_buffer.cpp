#include "workers/byte_buffer.hpp"

#include <sys/mman.h>

#include <ATen/Functions.h>

namespace ddprun::workers {

at::Tensor populated_bytes(std::size_t n) {
  const auto options = at::TensorOptions().dtype(at::kByte);
  if (n == 0) return at::empty({0}, options);
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return at::zeros({static_cast<std::int64_t>(n)}, options);
  return at::from_blob(p, {static_cast<std::int64_t>(n)}, [n](void* q) { ::munmap(q, n); }, options);
}

std::string_view byte_view(const at::Tensor& bytes) {
  if (!bytes.defined() || bytes.numel() == 0) return {};
  return {static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel())};
}

}  // namespace ddprun::workers
