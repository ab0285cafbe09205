#include "workers/distributed.hpp"

#include <cstring>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef DDPRUN_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "workers/byte_buffer.hpp"
#include "workers/worker_error.hpp"

namespace ddprun::workers {
namespace {

c10::intrusive_ptr<c10d::ProcessGroupGloo> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                     int rank, int world_size,
                                                     std::chrono::milliseconds timeout,
                                                     const std::string& ifname,
                                                     const std::string& host) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  // The device choice of torch.distributed: GLOO_SOCKET_IFNAME, else this host's name (falling
  // back to loopback when it does not resolve).
  if (!ifname.empty()) {
    opts->devices.push_back(checked(fmt::format("creating a Gloo device on interface {}", ifname),
                                    [&] { return c10d::ProcessGroupGloo::createDeviceForInterface(ifname); }));
  } else if (!host.empty()) {
    opts->devices.push_back(checked(fmt::format("creating a Gloo device for {}", host),
                                    [&] { return c10d::ProcessGroupGloo::createDeviceForHostname(host); }));
  } else {
    opts->devices.push_back(checked("creating the default Gloo device",
                                    [&] { return c10d::ProcessGroupGloo::createDefaultDevice(); }));
  }
  opts->threads = 2;
  return checked(fmt::format("creating the Gloo process group (rank {} of {})", rank, world_size),
                 [&] { return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, opts); });
}

}  // namespace

bool built_with_cuda() {
#ifdef DDPRUN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

Distributed::Distributed(int rank, int world_size, std::chrono::milliseconds timeout)
    : rank_(rank), world_size_(world_size), timeout_(timeout) {}

Distributed::~Distributed() = default;

std::unique_ptr<Distributed> Distributed::connect(const DistEnv& env, Backend backend,
                                                  std::chrono::milliseconds timeout) {
  std::unique_ptr<Distributed> d(new Distributed(env.rank, env.world_size, timeout));
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  c10d::TCPStoreOptions store_opts;
  store_opts.port = env.master_port;
  store_opts.timeout = timeout;
  if (env.use_agent_store) {
    store_opts.isServer = false;
    store_opts.waitWorkers = false;
    auto agent_store = checked(fmt::format("connecting to the agent's store at {}", where),
                               [&] { return c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_opts); });
    d->store_ = c10::make_intrusive<c10d::PrefixStore>(
        fmt::format("/worker/attempt_{}", env.restart_count), agent_store);
  } else {
    store_opts.isServer = env.rank == 0;
    store_opts.numWorkers = static_cast<std::size_t>(env.world_size);
    store_opts.waitWorkers = true;
    store_opts.multiTenant = true;
    d->store_ = checked(
        env.rank == 0
            ? fmt::format("hosting the c10d TCPStore at {} for {} ranks", where, env.world_size)
            : fmt::format("joining the c10d TCPStore at {}", where),
        [&] { return c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_opts); });
  }

  auto pg_store = c10::make_intrusive<c10d::PrefixStore>("default_pg", d->store_);
  switch (backend) {
    case Backend::kGloo:
      d->data_ = std::make_unique<C10dCollectives<c10d::ProcessGroupGloo>>(
          make_gloo(pg_store, env.rank, env.world_size, timeout, env.gloo_socket_ifname, ""));
      break;
    case Backend::kNccl: {
#ifdef DDPRUN_WITH_CUDA
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      d->data_ = std::make_unique<C10dCollectives<c10d::ProcessGroupNCCL>>(checked(
          fmt::format("creating the NCCL process group (rank {} of {})", env.rank, env.world_size),
          [&] { return c10::make_intrusive<c10d::ProcessGroupNCCL>(pg_store, env.rank, env.world_size, opts); }));
      auto control_store = c10::make_intrusive<c10d::PrefixStore>("control_pg", d->store_);
      d->control_ = std::make_unique<C10dCollectives<c10d::ProcessGroupGloo>>(
          make_gloo(control_store, env.rank, env.world_size, timeout, env.gloo_socket_ifname, ""));
#else
      throw ConfigError("--backend nccl: this ddp_resnet was built without CUDA");
#endif
      break;
    }
  }
  return d;
}

std::unique_ptr<Distributed> Distributed::over_store(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                     int world_size,
                                                     std::chrono::milliseconds timeout,
                                                     const std::string& gloo_host) {
  std::unique_ptr<Distributed> d(new Distributed(rank, world_size, timeout));
  d->store_ = std::move(store);
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>("default_pg", d->store_);
  d->data_ = std::make_unique<C10dCollectives<c10d::ProcessGroupGloo>>(
      make_gloo(pg_store, rank, world_size, timeout, "", gloo_host));
  return d;
}

void Distributed::wait(WorkHandle& work, const char* what) {
  checked(what, [&] { work->wait(timeout_); });
}

void Distributed::broadcast_bytes(at::Tensor& bytes, int root) {
  at::Tensor size = at::empty({1}, at::kLong);
  if (rank_ == root) {
    if (!bytes.defined()) bytes = populated_bytes(0);
    if (bytes.scalar_type() != at::kByte || bytes.dim() != 1) {
      throw Error("broadcast_bytes: the root's tensor must be 1-D uint8");
    }
    bytes = bytes.contiguous();
  }
  size[0] = rank_ == root ? bytes.numel() : 0;
  auto work = checked("broadcast of a byte count", [&] { return control().broadcast(size, root); });
  wait(work, "broadcast of a byte count");
  const auto n = size[0].item<std::int64_t>();
  if (rank_ != root) bytes = populated_bytes(static_cast<std::size_t>(n));
  if (n == 0) return;
  const std::string what = fmt::format("broadcast of {} bytes from rank {}", n, root);
  work = checked(what, [&] { return control().broadcast(bytes, root); });
  wait(work, what.c_str());
}

std::vector<at::Tensor> Distributed::allgather_tensor(const at::Tensor& mine) {
  at::Tensor input = mine.contiguous();
  std::vector<at::Tensor> outputs;
  for (int r = 0; r < world_size_; ++r) outputs.push_back(at::empty_like(input));
  auto work = checked("allgather", [&] { return control().allgather(outputs, input); });
  wait(work, "allgather");
  return outputs;
}

std::vector<std::vector<std::int64_t>> Distributed::allgather_int64(
    const std::vector<std::int64_t>& mine) {
  at::Tensor input = at::empty({static_cast<std::int64_t>(mine.size())}, at::kLong);
  std::memcpy(input.data_ptr(), mine.data(), mine.size() * sizeof(std::int64_t));
  std::vector<std::vector<std::int64_t>> all;
  for (const at::Tensor& t : allgather_tensor(input)) {
    const auto* p = t.data_ptr<std::int64_t>();
    all.emplace_back(p, p + t.numel());
  }
  return all;
}

double Distributed::allreduce_sum(double value) {
  at::Tensor t = at::empty({1}, at::kDouble);
  t[0] = value;
  auto work = checked("allreduce of a scalar", [&] { return control().allreduce_sum(t); });
  wait(work, "allreduce of a scalar");
  return t[0].item<double>();
}

void Distributed::barrier() {
  auto work = checked("barrier", [&] { return control().barrier(); });
  wait(work, "barrier");
}

}  // namespace ddprun::workers
