#pragma once
// What differs between the libtorch versions ddp_resnet builds against, in one place: Debian's
// 1.13 (CPU, Gloo; what CI builds) and the 2.x that PyTorch wheels ship (CUDA, NCCL). Nothing
// else in workers/ tests TORCH_VERSION_*. The c10d collectives need no shim: their classes
// moved (ProcessGroup in 1.x, Backend in 2.x) but kept their methods, which
// C10dCollectives (collectives.hpp) uses through a template.

#include <sstream>
#include <string>
#include <type_traits>

#include <ATen/Tensor.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#define DDPRUN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ddprun::workers::compat {

// Autocast on (with `dtype`) or off for one device type, CUDA or CPU. libtorch 2.4 replaced the
// per-device setters (set_enabled/set_cpu_enabled, set_autocast_gpu_dtype/cpu_dtype) with ones
// that take the device type.
inline void set_autocast(c10::DeviceType device, bool on, at::ScalarType dtype) {
#if DDPRUN_TORCH_AT_LEAST(2, 4)
  if (on) at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, on);
#else
  if (device == c10::DeviceType::CUDA) {
    if (on) at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(on);
  } else {
    if (on) at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(on);
  }
#endif
}

// The key of a parameter's entry in torch::optim::Optimizer::state(): the TensorImpl's address,
// printed as text in 1.x (c10::guts::to_string: "0x..."), the address itself in later versions.
// Chosen by the map's key type, so whichever a version uses is matched exactly.
template <class StateMap>
auto optimizer_state_key(const StateMap&, const at::Tensor& param) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << static_cast<const void*>(param.unsafeGetTensorImpl());
    return text.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace ddprun::workers::compat
