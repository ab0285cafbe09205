#include "launcher/gpu_count.hpp"

#include <dlfcn.h>

#include <cstdlib>

#include "common/strings.hpp"

namespace ddprun {

std::optional<int> cuda_devices_from_visible_env(std::string_view value) {
  auto list = trim(value);
  if (list.empty()) return 0;
  // CUDA stops at the first invalid entry, so a leading -1 hides everything.
  if (trim(split(list, ',').front()) == "-1") return 0;
  return std::nullopt;
}

int visible_cuda_devices() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    if (auto count = cuda_devices_from_visible_env(visible)) return *count;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return 0;
  // CUresult is an enum whose success value is 0; declaring it as int avoids cuda.h.
  using CuInit = int (*)(unsigned int);
  using CuDeviceGetCount = int (*)(int*);
  auto cu_init = reinterpret_cast<CuInit>(dlsym(lib, "cuInit"));
  auto cu_device_get_count = reinterpret_cast<CuDeviceGetCount>(dlsym(lib, "cuDeviceGetCount"));
  if (cu_init == nullptr || cu_device_get_count == nullptr || cu_init(0) != 0) {
    dlclose(lib);
    return 0;
  }
  int count = 0;
  if (cu_device_get_count(&count) != 0) count = 0;
  // No dlclose once cuInit succeeded: the driver may have started threads and registered
  // exit handlers that live in the library, and unmapping it under them would crash at exit.
  // The handle is deliberately leaked; a second dlopen just bumps its reference count.
  return count;
}

}  // namespace ddprun
