#include "workers/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <sstream>

#include <sys/stat.h>

#include <fmt/format.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "common/error.hpp"
#include "workers/byte_buffer.hpp"

namespace ddprun::workers {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kFormatVersion = 1;

std::int64_t read_int(torch::serialize::InputArchive& archive, const char* key) {
  c10::IValue value;
  archive.read(key, value);
  if (!value.isInt()) throw ConfigError(fmt::format("checkpoint entry '{}' is not an integer", key));
  return value.toInt();
}

void write_all(int fd, const std::string& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("writing {}: {}", path, errno_message(errno)));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::string save_checkpoint(const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                            const Checkpoint& checkpoint) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive;
  module.save(model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("format_version", c10::IValue(kFormatVersion));
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("arch", c10::IValue(checkpoint.arch));
  archive.write("epoch", c10::IValue(checkpoint.position.epoch));
  archive.write("epoch_step", c10::IValue(checkpoint.position.epoch_step));
  archive.write("global_step", c10::IValue(checkpoint.position.global_step));
  archive.write("world_size", c10::IValue(checkpoint.position.world_size));
  archive.write("batch_size", c10::IValue(checkpoint.position.batch_size));
  if (checkpoint.rng_states.defined()) archive.write("rng_states", checkpoint.rng_states);
  std::ostringstream out;
  archive.save_to(out);
  return std::move(out).str();
}

Checkpoint load_checkpoint(std::string_view bytes, torch::nn::Module& module,
                           torch::optim::Optimizer& optimizer, const std::string& expected_arch,
                           const torch::Device& device) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(bytes.data(), bytes.size(), device);
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("not a ddp_resnet checkpoint ({} bytes): {}", bytes.size(),
                                  std::string(e.what()).substr(0, 200)));
  }
  const std::int64_t version = read_int(archive, "format_version");
  if (version != kFormatVersion) {
    throw ConfigError(fmt::format("checkpoint format {} is not {}", version, kFormatVersion));
  }
  Checkpoint checkpoint;
  c10::IValue arch;
  archive.read("arch", arch);
  checkpoint.arch = arch.toStringRef();
  if (checkpoint.arch != expected_arch) {
    throw ConfigError(fmt::format("the checkpoint holds a {}, not a {} (--arch)", checkpoint.arch,
                                  expected_arch));
  }
  torch::serialize::InputArchive model_archive;
  archive.read("model", model_archive);
  module.load(model_archive);
  torch::serialize::InputArchive optimizer_archive;
  archive.read("optimizer", optimizer_archive);
  optimizer.load(optimizer_archive);
  checkpoint.position.epoch = read_int(archive, "epoch");
  checkpoint.position.epoch_step = read_int(archive, "epoch_step");
  checkpoint.position.global_step = read_int(archive, "global_step");
  checkpoint.position.world_size = read_int(archive, "world_size");
  checkpoint.position.batch_size = read_int(archive, "batch_size");
  at::Tensor rng;
  if (archive.try_read("rng_states", rng)) checkpoint.rng_states = rng.cpu();
  return checkpoint;
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp =
      (dir / fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("creating {}: {}", tmp, errno_message(errno)));
  try {
    write_all(fd, bytes, tmp);
    if (::fsync(fd) != 0) throw Error(fmt::format("fsync {}: {}", tmp, errno_message(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("renaming {} to {}: {}", tmp, path, errno_message(err)));
  }
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // best effort: the rename is durable once the directory is
    ::close(dir_fd);
  }
}

std::optional<at::Tensor> read_file_if_exists(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  // No file, or a path through something that is not a directory: no checkpoint. Any other
  // error (permissions) is one, rather than a fresh start that ignores the checkpoint.
  if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) return std::nullopt;
  if (fd < 0) throw Error(fmt::format("cannot open {}: {}", path, errno_message(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(fmt::format("cannot stat {}: {}", path, errno_message(errno)));
  const auto size = static_cast<std::size_t>(st.st_size);
  // One buffer of the file's size, mapped up front: a checkpoint is tens of megabytes, and a
  // restart waits for it.
  at::Tensor bytes = populated_bytes(size);
  auto* data = static_cast<char*>(bytes.data_ptr());
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("reading {}: {}", path, errno_message(errno)));
    if (n == 0) throw Error(fmt::format("reading {} ended after {} of {} bytes", path, done, size));
    done += static_cast<std::size_t>(n);
  }
  return bytes;
}

}  // namespace ddprun::workers
