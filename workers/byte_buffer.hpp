#pragma once
// Large host byte buffers for a restart's checkpoint: read, broadcast and parsed once each.

#include <cstddef>
#include <string_view>

#include <ATen/core/Tensor.h>

namespace ddprun::workers {

// A 1-D uint8 CPU tensor of `n` bytes whose pages are mapped in one call (MAP_POPULATE), not
// one fault per page as it is first written: a restart fills tens of megabytes at once, and on a
// virtual machine a fault per 4 KiB page costs more than the copy. Falls back to at::zeros when
// the mapping is refused. Contents are zero.
at::Tensor populated_bytes(std::size_t n);

// The bytes of a 1-D uint8 tensor (contiguous), empty for an undefined or empty tensor.
std::string_view byte_view(const at::Tensor& bytes);

}  // namespace ddprun::workers
