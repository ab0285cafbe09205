#include "launcher/gpu_count.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <optional>

#include "agent/gpu_check.hpp"

namespace ddprun {

namespace {

// The driver's entry points ddprun uses. CUresult is an enum whose success value is 0 and
// CUdevice an int; declaring them so avoids cuda.h.
struct CudaDriver {
  int (*init)(unsigned int) = nullptr;
  int (*device_get_count)(int*) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*device_get_pci_bus_id)(char*, int, int) = nullptr;
};

// The driver, initialised; nullopt when it is absent or cuInit fails. No dlclose once cuInit
// succeeded: the driver may have started threads and registered exit handlers that live in the
// library, and unmapping it under them would crash at exit. The handle is deliberately leaked;
// a second dlopen just bumps its reference count.
std::optional<CudaDriver> cuda_driver() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    if (cuda_devices_hidden(visible)) return std::nullopt;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  CudaDriver d;
  d.init = reinterpret_cast<decltype(d.init)>(dlsym(lib, "cuInit"));
  d.device_get_count = reinterpret_cast<decltype(d.device_get_count)>(dlsym(lib, "cuDeviceGetCount"));
  d.device_get = reinterpret_cast<decltype(d.device_get)>(dlsym(lib, "cuDeviceGet"));
  d.device_get_pci_bus_id =
      reinterpret_cast<decltype(d.device_get_pci_bus_id)>(dlsym(lib, "cuDeviceGetPCIBusId"));
  if (d.init == nullptr || d.device_get_count == nullptr || d.init(0) != 0) {
    dlclose(lib);
    return std::nullopt;
  }
  return d;
}

int device_count(const CudaDriver& d) {
  int count = 0;
  return d.device_get_count(&count) == 0 ? count : 0;
}

}  // namespace

int visible_cuda_devices() {
  auto driver = cuda_driver();
  return driver ? device_count(*driver) : 0;
}

std::vector<std::string> visible_cuda_pci_bus_ids() {
  std::vector<std::string> ids;
  auto driver = cuda_driver();
  if (!driver || driver->device_get == nullptr || driver->device_get_pci_bus_id == nullptr) {
    return ids;
  }
  const int count = device_count(*driver);
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    int device = 0;
    char bus_id[64] = "";
    if (driver->device_get(&device, ordinal) != 0 ||
        driver->device_get_pci_bus_id(bus_id, sizeof(bus_id), device) != 0) {
      return {};
    }
    ids.emplace_back(bus_id);
  }
  return ids;
}

}  // namespace ddprun
