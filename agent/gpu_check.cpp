#include "agent/gpu_check.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/node_check.hpp"
#include "common/strings.hpp"

namespace ddprun {
namespace {

// NVML's types and values that ddprun uses, declared here so that no nvml.h is needed to build
// it (nvmlReturn_t and the enums are ints; nvmlDevice_t is a pointer).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNotSupported = 3;
constexpr NvmlReturn kNvmlNoPermission = 4;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
constexpr NvmlReturn kNvmlDriverNotLoaded = 9;
constexpr NvmlReturn kNvmlLibraryNotFound = 12;
constexpr int kNvmlUncorrected = 1;      // nvmlMemoryErrorType_t
constexpr int kNvmlVolatileEcc = 0;      // nvmlEccCounterType_t
constexpr int kNvmlAggregateEcc = 1;
constexpr int kNvmlRetiredMultipleSbe = 0;  // nvmlPageRetirementCause_t
constexpr int kNvmlRetiredDbe = 1;
constexpr unsigned kNvmlTextSize = 96;   // NVML_DEVICE_UUID_V2_BUFFER_SIZE, _NAME_V2_

struct NvmlMemory {
  unsigned long long total, free, used;  // used: with the driver's reserve
};
// nvmlMemory_v2_t, whose used leaves out the memory the driver reserves for itself.
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
constexpr unsigned kNvmlMemoryV2Version = sizeof(NvmlMemoryV2) | (2u << 24);

// nvmlProcessInfo_t of every version starts with the pid (an unsigned int) and, 8 bytes in,
// the memory it uses (an unsigned long long); the versions differ in what follows, so in
// their size: 16 bytes (the unversioned call), 24 (_v2, and _v3 of most drivers), 32 (_v3 of
// the drivers that added usedGpuCcProtectedMemory to it and took it out again).
constexpr std::size_t kProcessPidAt = 0;
constexpr std::size_t kProcessUsedAt = 8;
// The room given to each entry: twice the largest any driver writes, so that one whose entries
// grew again reads wrong figures instead of writing past the buffer.
constexpr std::size_t kProcessEntryRoom = 64;

template <class F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*memory_v2)(NvmlDevice, NvmlMemoryV2*) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned*, void*) = nullptr;
  std::size_t process_info_size = 0;  // of the entries `processes` writes
  NvmlReturn (*ecc)(NvmlDevice, int, int, unsigned long long*) = nullptr;
  NvmlReturn (*retired)(NvmlDevice, int, unsigned*, unsigned long long*) = nullptr;
  NvmlReturn (*retired_pending)(NvmlDevice, int*) = nullptr;
  NvmlReturn (*remapped)(NvmlDevice, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;

  std::string text(NvmlReturn r) const {
    const char* s = error_string == nullptr ? nullptr : error_string(r);
    return s == nullptr ? fmt::format("NVML error {}", r) : std::string(s);
  }
};

// The library and its entry points; nullopt when it is absent or lacks the ones every driver
// has. Never closed: NVML may have started threads that live in it.
std::optional<Nvml> load_nvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  Nvml n;
  n.init = symbol<decltype(n.init)>(lib, "nvmlInit_v2");
  n.shutdown = symbol<decltype(n.shutdown)>(lib, "nvmlShutdown");
  n.error_string = symbol<decltype(n.error_string)>(lib, "nvmlErrorString");
  n.count = symbol<decltype(n.count)>(lib, "nvmlDeviceGetCount_v2");
  n.handle = symbol<decltype(n.handle)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  n.uuid = symbol<decltype(n.uuid)>(lib, "nvmlDeviceGetUUID");
  n.name = symbol<decltype(n.name)>(lib, "nvmlDeviceGetName");
  n.memory = symbol<decltype(n.memory)>(lib, "nvmlDeviceGetMemoryInfo");
  n.memory_v2 = symbol<decltype(n.memory_v2)>(lib, "nvmlDeviceGetMemoryInfo_v2");
  // The newest listing there is, and the size of its entries. The drivers whose _v3 entries
  // are 32 bytes are the ones with confidential computing's calls and without the
  // process-detail list that came after.
  using Listing = decltype(n.processes);
  if ((n.processes = symbol<Listing>(lib, "nvmlDeviceGetComputeRunningProcesses_v3"))) {
    const bool wide = dlsym(lib, "nvmlDeviceGetConfComputeMemSizeInfo") != nullptr &&
                      dlsym(lib, "nvmlDeviceGetRunningProcessDetailList") == nullptr;
    n.process_info_size = wide ? 32 : 24;
  } else if ((n.processes = symbol<Listing>(lib, "nvmlDeviceGetComputeRunningProcesses_v2"))) {
    n.process_info_size = 24;
  } else if ((n.processes = symbol<Listing>(lib, "nvmlDeviceGetComputeRunningProcesses"))) {
    n.process_info_size = 16;
  }
  n.ecc = symbol<decltype(n.ecc)>(lib, "nvmlDeviceGetTotalEccErrors");
  n.retired = symbol<decltype(n.retired)>(lib, "nvmlDeviceGetRetiredPages");
  n.retired_pending =
      symbol<decltype(n.retired_pending)>(lib, "nvmlDeviceGetRetiredPagesPendingStatus");
  n.remapped = symbol<decltype(n.remapped)>(lib, "nvmlDeviceGetRemappedRows");
  if (n.init == nullptr || n.count == nullptr || n.handle == nullptr || n.uuid == nullptr) {
    return std::nullopt;
  }
  return n;
}

// The compute processes on `device`: asked for their number, then for them, with room for a
// few that start in between (asked again, twice at most, when more did).
NvmlReturn list_processes(const Nvml& nvml, NvmlDevice device, std::vector<GpuProcess>& out) {
  unsigned count = 0;
  NvmlReturn r = nvml.processes(device, &count, nullptr);
  for (int ask = 0; ask < 3 && r == kNvmlInsufficientSize; ++ask) {
    const unsigned room = count + 8;
    std::vector<unsigned char> entries(room * kProcessEntryRoom);
    count = room;
    r = nvml.processes(device, &count, entries.data());
    if (r == kNvmlSuccess) {
      out = process_entries(entries.data(), std::min(count, room), nvml.process_info_size);
    }
  }
  return r;
}

std::int64_t retired_pages(const Nvml& nvml, NvmlDevice device) {
  std::int64_t total = 0;
  for (int cause : {kNvmlRetiredMultipleSbe, kNvmlRetiredDbe}) {
    unsigned count = 0;
    const NvmlReturn r = nvml.retired(device, cause, &count, nullptr);
    if (r != kNvmlSuccess && r != kNvmlInsufficientSize) return -1;
    total += count;
  }
  return total;
}

std::int64_t ecc_count(const Nvml& nvml, NvmlDevice device, int counter) {
  unsigned long long count = 0;
  if (nvml.ecc == nullptr || nvml.ecc(device, kNvmlUncorrected, counter, &count) != kNvmlSuccess) {
    return -1;
  }
  return static_cast<std::int64_t>(count);
}

// One GPU's figures. What NVML does not support on it stays at "not supported"; a call that
// fails otherwise is the GPU's error.
GpuProbe probe_gpu(const Nvml& nvml, int index, NvmlDevice device, const std::string& uuid) {
  GpuProbe g;
  g.index = index;
  g.uuid = uuid;
  char text[kNvmlTextSize] = "";
  if (nvml.name != nullptr && nvml.name(device, text, sizeof(text)) == kNvmlSuccess) g.name = text;
  // What NVML may not tell this user, or on this GPU (a MIG parent without privileges), is a
  // figure unknown, not a GPU at fault; so is a listing that processes starting all the while
  // kept outgrowing.
  const auto failed = [](NvmlReturn r) {
    return r != kNvmlSuccess && r != kNvmlNotSupported && r != kNvmlNoPermission &&
           r != kNvmlInsufficientSize;
  };
  NvmlMemoryV2 memory_v2{};
  memory_v2.version = kNvmlMemoryV2Version;
  NvmlMemory memory{};
  if (nvml.memory_v2 != nullptr && nvml.memory_v2(device, &memory_v2) == kNvmlSuccess) {
    g.memory_total_bytes = memory_v2.total;
    g.memory_used_bytes = memory_v2.used;
  } else if (nvml.memory != nullptr) {
    const NvmlReturn r = nvml.memory(device, &memory);
    if (failed(r)) {
      g.error = "reading its memory: " + nvml.text(r);
      return g;
    }
    g.memory_total_bytes = memory.total;
    g.memory_used_bytes = memory.used;
  }
  if (nvml.processes != nullptr) {
    if (const NvmlReturn r = list_processes(nvml, device, g.processes); failed(r)) {
      g.error = "listing its processes: " + nvml.text(r);
      return g;
    }
  }
  g.ecc_uncorrected_volatile = ecc_count(nvml, device, kNvmlVolatileEcc);
  g.ecc_uncorrected_aggregate = ecc_count(nvml, device, kNvmlAggregateEcc);
  if (nvml.retired != nullptr) g.retired_pages = retired_pages(nvml, device);
  int pending = 0;
  if (nvml.retired_pending != nullptr &&
      nvml.retired_pending(device, &pending) == kNvmlSuccess) {
    g.retired_pages_pending = pending != 0;
  }
  unsigned corrected = 0, uncorrected = 0, remap_pending = 0, remap_failed = 0;
  if (nvml.remapped != nullptr &&
      nvml.remapped(device, &corrected, &uncorrected, &remap_pending, &remap_failed) ==
          kNvmlSuccess) {
    g.remapped_rows_uncorrectable = uncorrected;
    g.remap_pending = remap_pending != 0;
    g.remap_failed = remap_failed != 0;
  }
  return g;
}

std::string held_by(const GpuProcess& p) {
  return p.used_bytes == kNvmlValueNotAvailable
             ? fmt::format("pid {}", p.pid)
             : fmt::format("{} of pid {}", format_bytes(p.used_bytes), p.pid);
}

// An entry of CUDA_VISIBLE_DEVICES read as CUDA reads a number, as strtoul does: an optional
// sign, then the digits it starts with ("1gpu" is 1); nullopt without digits.
std::optional<long long> leading_number(std::string_view entry) {
  bool negative = false;
  if (!entry.empty() && (entry.front() == '+' || entry.front() == '-')) {
    negative = entry.front() == '-';
    entry.remove_prefix(1);
  }
  long long value = 0;
  std::size_t digits = 0;
  for (; digits < entry.size() && entry[digits] >= '0' && entry[digits] <= '9'; ++digits) {
    value = std::min(value * 10 + (entry[digits] - '0'), 1'000'000'000LL);  // past any GPU
  }
  if (digits == 0) return std::nullopt;
  return negative ? -value : value;
}

}  // namespace

std::vector<GpuProcess> process_entries(const unsigned char* entries, unsigned count,
                                        std::size_t entry_size) {
  std::vector<GpuProcess> out;
  for (unsigned i = 0; i < count; ++i) {
    const unsigned char* entry = entries + i * entry_size;
    GpuProcess p;
    std::memcpy(&p.pid, entry + kProcessPidAt, sizeof(p.pid));
    std::memcpy(&p.used_bytes, entry + kProcessUsedAt, sizeof(p.used_bytes));
    out.push_back(p);
  }
  return out;
}

bool cuda_devices_hidden(std::string_view value) {
  const auto list = trim(value);
  if (list.empty()) return true;
  const auto first = leading_number(trim(split(list, ',').front()));
  return first && *first < 0;
}

std::optional<std::vector<int>> visible_gpus(const std::vector<std::string>& uuids,
                                             const std::optional<std::string>& visible) {
  const int gpus = static_cast<int>(uuids.size());
  std::vector<int> out;
  if (!visible) {
    for (int i = 0; i < gpus; ++i) out.push_back(i);
    return out;
  }
  // First the list as written, up to an entry of another kind or a negative number: an entry
  // written twice there leaves none, whether or not it names a GPU.
  const auto entries = split(*visible, ',');
  const auto first = trim(entries.front());
  if (first.starts_with("MIG-")) return std::nullopt;
  const bool by_uuid = first.starts_with("GPU-");
  std::vector<std::string> written;
  for (const auto& text : entries) {
    std::string entry(trim(text));
    if (by_uuid && !entry.starts_with("GPU-")) break;
    if (!by_uuid) {
      const auto n = leading_number(entry);
      if (!n || *n < 0) break;
      entry = std::to_string(*n);
    }
    if (std::find(written.begin(), written.end(), entry) != written.end()) return out;
    written.push_back(std::move(entry));
  }
  // Then the GPUs they name, up to one that names none (or, a UUID's prefix, two).
  for (const auto& entry : written) {
    int found = -1;
    if (by_uuid) {
      for (int i = 0; i < gpus; ++i) {
        if (!uuids[static_cast<std::size_t>(i)].starts_with(entry)) continue;
        if (found >= 0) return out;
        found = i;
      }
    } else if (const auto n = *parse_int(entry); n < gpus) {
      found = static_cast<int>(n);
    }
    if (found < 0) break;
    if (std::find(out.begin(), out.end(), found) != out.end()) return std::vector<int>{};
    out.push_back(found);
  }
  return out;
}

GpuSurvey survey_gpus(const std::optional<std::string>& cuda_visible_devices, int workers) {
  GpuSurvey s;
  s.skipped.clear();
  if (cuda_visible_devices && cuda_devices_hidden(*cuda_visible_devices)) {
    s.skipped = "CUDA_VISIBLE_DEVICES hides every GPU";
    return s;
  }
  const auto nvml = load_nvml();
  if (!nvml) {
    s.skipped = "no NVIDIA driver here (libnvidia-ml.so.1)";
    return s;
  }
  if (const NvmlReturn r = nvml->init(); r != kNvmlSuccess) {
    if (r == kNvmlDriverNotLoaded || r == kNvmlLibraryNotFound) {
      s.skipped = "no NVIDIA driver loaded here: " + nvml->text(r);
    } else {
      s.error = "NVML did not start: " + nvml->text(r);
    }
    return s;
  }
  // The GPUs this process may use, in NVML's order: as CUDA does, those it has no permission
  // for (outside a Slurm job's or a container's devices) are not there, and the others are
  // numbered without them, as CUDA_VISIBLE_DEVICES numbers them.
  struct Usable {
    int index;  // NVML's
    NvmlDevice device;
    std::string error;  // NVML cannot even name it: it keeps its place, and is named if seen
  };
  std::vector<Usable> usable;
  std::vector<std::string> uuids;
  unsigned count = 0;
  if (const NvmlReturn r = nvml->count(&count); r != kNvmlSuccess) {
    s.error = "NVML could not count the GPUs: " + nvml->text(r);
  }
  for (unsigned i = 0; s.error.empty() && i < count; ++i) {
    NvmlDevice device = nullptr;
    char uuid[kNvmlTextSize] = "";
    NvmlReturn r = nvml->handle(i, &device);
    if (r == kNvmlSuccess) r = nvml->uuid(device, uuid, sizeof(uuid));
    if (r == kNvmlNoPermission) continue;
    usable.push_back({static_cast<int>(i), device, r == kNvmlSuccess ? "" : nvml->text(r)});
    uuids.emplace_back(uuid);
  }
  if (s.error.empty() && count > 0 && usable.empty()) {
    s.skipped = fmt::format("none of this machine's {} GPU(s) is open to this process", count);
  } else if (s.error.empty()) {
    const auto shown = visible_gpus(uuids, cuda_visible_devices);
    if (!shown) {
      s.skipped = "CUDA_VISIBLE_DEVICES names MIG devices, which this check does not read";
    } else {
      s.visible = static_cast<int>(shown->size());
      const auto taken = std::min(shown->size(), static_cast<std::size_t>(std::max(workers, 0)));
      for (std::size_t t = 0; t < taken; ++t) {
        const auto k = static_cast<std::size_t>((*shown)[t]);
        const auto& u = usable[k];
        if (u.error.empty()) {
          s.gpus.push_back(probe_gpu(*nvml, u.index, u.device, uuids[k]));
        } else {
          GpuProbe lost;
          lost.index = u.index;
          lost.error = u.error;
          s.gpus.push_back(std::move(lost));
        }
      }
    }
  }
  if (nvml->shutdown != nullptr) nvml->shutdown();
  return s;
}

std::vector<std::string> gpu_troubles(const GpuSurvey& s, int workers) {
  std::vector<std::string> out;
  if (!s.skipped.empty()) return out;
  if (!s.error.empty()) {
    out.push_back(s.timed_out ? s.error + " (a GPU or its driver in trouble?)" : s.error);
    return out;
  }
  if (workers > s.visible) {
    out.push_back(fmt::format("{} workers, but {} GPU(s) visible to them", workers, s.visible));
  }
  // Local rank i takes GPU i: the GPUs past the workers' are none of the job's business (on a
  // shared machine, another job's).
  const std::size_t used = std::min(s.gpus.size(), static_cast<std::size_t>(workers));
  for (std::size_t k = 0; k < used; ++k) {
    const auto& g = s.gpus[k];
    if (!g.error.empty()) {
      out.push_back(fmt::format("GPU {}: {}", g.index, g.error));
      continue;
    }
    if (!g.processes.empty()) {
      std::string holders;
      for (const auto& p : g.processes) holders += (holders.empty() ? "" : ", ") + held_by(p);
      out.push_back(fmt::format("GPU {} holds {}", g.index, holders));
    } else if (g.memory_used_bytes > kGpuMaxUnexplainedUsedBytes) {
      out.push_back(fmt::format("GPU {} has {} of {} in use that no listed process holds",
                                g.index, format_bytes(g.memory_used_bytes),
                                format_bytes(g.memory_total_bytes)));
    }
    if (g.ecc_uncorrected_volatile > 0) {
      out.push_back(fmt::format("GPU {}: {} uncorrectable ECC error(s) since the driver loaded",
                                g.index, g.ecc_uncorrected_volatile));
    }
    if (g.remap_failed) {
      out.push_back(fmt::format("GPU {}: a row remapping failed (the GPU needs service)",
                                g.index));
    } else if (g.remap_pending || g.retired_pages_pending) {
      out.push_back(fmt::format("GPU {}: memory {} pending a reset of the GPU", g.index,
                                g.remap_pending ? "rows remapped" : "pages retired"));
    }
  }
  return out;
}

std::string gpu_summary(const GpuSurvey& s) {
  if (!s.skipped.empty()) return "-";
  if (s.timed_out) return "no answer";
  if (!s.error.empty()) return "error";
  const auto held = std::count_if(s.gpus.begin(), s.gpus.end(),
                                  [](const GpuProbe& g) { return !g.processes.empty(); });
  return held == 0 ? std::to_string(s.visible) : fmt::format("{} ({} held)", s.visible, held);
}

nlohmann::json to_json(const GpuSurvey& s) {
  auto gpus = nlohmann::json::array();
  for (const auto& g : s.gpus) {
    auto processes = nlohmann::json::array();
    for (const auto& p : g.processes) {
      processes.push_back({{"pid", p.pid}, {"used_bytes", p.used_bytes}});
    }
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"uuid", g.uuid},
                    {"error", g.error},
                    {"memory_total_bytes", g.memory_total_bytes},
                    {"memory_used_bytes", g.memory_used_bytes},
                    {"processes", std::move(processes)},
                    {"ecc_uncorrected_volatile", g.ecc_uncorrected_volatile},
                    {"ecc_uncorrected_aggregate", g.ecc_uncorrected_aggregate},
                    {"retired_pages", g.retired_pages},
                    {"retired_pages_pending", g.retired_pages_pending},
                    {"remapped_rows_uncorrectable", g.remapped_rows_uncorrectable},
                    {"remap_pending", g.remap_pending},
                    {"remap_failed", g.remap_failed}});
  }
  return {{"skipped", s.skipped},
          {"error", s.error},
          {"timed_out", s.timed_out},
          {"visible", s.visible},
          {"gpus", std::move(gpus)}};
}

GpuSurvey gpu_survey_from_json(const nlohmann::json& j) {
  GpuSurvey s;
  s.skipped = j.at("skipped").get<std::string>();
  s.error = j.at("error").get<std::string>();
  s.timed_out = j.at("timed_out").get<bool>();
  s.visible = j.at("visible").get<int>();
  for (const auto& g : j.at("gpus")) {
    GpuProbe p;
    p.index = g.at("index").get<int>();
    p.name = g.at("name").get<std::string>();
    p.uuid = g.at("uuid").get<std::string>();
    p.error = g.at("error").get<std::string>();
    p.memory_total_bytes = g.at("memory_total_bytes").get<std::uint64_t>();
    p.memory_used_bytes = g.at("memory_used_bytes").get<std::uint64_t>();
    for (const auto& q : g.at("processes")) {
      p.processes.push_back({q.at("pid").get<std::uint32_t>(),
                             q.at("used_bytes").get<std::uint64_t>()});
    }
    p.ecc_uncorrected_volatile = g.at("ecc_uncorrected_volatile").get<std::int64_t>();
    p.ecc_uncorrected_aggregate = g.at("ecc_uncorrected_aggregate").get<std::int64_t>();
    p.retired_pages = g.at("retired_pages").get<std::int64_t>();
    p.retired_pages_pending = g.at("retired_pages_pending").get<bool>();
    p.remapped_rows_uncorrectable = g.at("remapped_rows_uncorrectable").get<std::int64_t>();
    p.remap_pending = g.at("remap_pending").get<bool>();
    p.remap_failed = g.at("remap_failed").get<bool>();
    s.gpus.push_back(std::move(p));
  }
  return s;
}

}  // namespace ddprun
