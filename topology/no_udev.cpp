// hwloc's Linux backend calls libudev for one thing: the vendor, model and serial number of
// block devices, which ddprun never asks for (it reads CPUs, caches, NUMA nodes and PCI
// locality). Debian's libhwloc.a is built with udev, so linking it would make ddprun load
// libudev.so.1 at every start, and a host without it (a minimal container) could not run a
// staged ddprun. These definitions say "no udev": udev_new() returns null, which hwloc takes
// as udev being unavailable and reads sysfs instead; the others are then never called.

extern "C" {

struct udev;
struct udev_device;

struct udev* udev_new() { return nullptr; }
struct udev* udev_unref(struct udev*) { return nullptr; }
struct udev_device* udev_device_new_from_subsystem_sysname(struct udev*, const char*,
                                                           const char*) {
  return nullptr;
}
const char* udev_device_get_property_value(struct udev_device*, const char*) { return nullptr; }
struct udev_device* udev_device_unref(struct udev_device*) { return nullptr; }

}  // extern "C"
