#!/usr/bin/env python3
"""The Python reference for ddp_resnet: torchvision ResNet + torch DistributedDataParallel.

Same flags and the same output lines as workers/ddp_resnet, for side-by-side comparisons
(throughput, loss curves). Start it like any torchrun script:

    PYTHON_EXEC=/usr/bin/python3 ddprun --nproc-per-node=2 scripts/reference_ddp.py \
        --backend gloo --arch resnet18 --use_syn --image_size 32 --batch_size 32 --num_epochs 3

The synthetic images are drawn exactly as ddp_resnet draws them (the same torch CPU generator
seeds), but the sampler is torch's DistributedSampler, whose shuffle differs from ddp_resnet's,
so --syn_learnable and CIFAR-10 runs see the same samples in another order.
"""
import argparse
import datetime
import hashlib
import math
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

EXIT_USAGE, EXIT_INJECTED, EXIT_OUT_OF_SYNC = 2, 3, 4
ARCHS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
CIFAR_MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
CIFAR_STD = torch.tensor([0.2023, 0.1994, 0.2010]).view(1, 3, 1, 1)


def say(text):
    print(text, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default="resnet50", choices=ARCHS)
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--num_epochs", type=int, default=10000)
    p.add_argument("--learning_rate", type=float, default=0.1)
    p.add_argument("--random_seed", type=int, default=0)
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--use_syn", action="store_true")
    p.add_argument("--steps_syn", type=int, default=20)
    p.add_argument("--syn_learnable", action="store_true")
    p.add_argument("--model_dir", default="saved_models")
    p.add_argument("--model_filename", default="resnet_distributed.pth")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--local_rank", "--local-rank", type=int)
    p.add_argument("--data_dir", default="data/cifar-10-batches-bin")
    p.add_argument("--num_classes", type=int)
    p.add_argument("--checkpoint_every", type=int, default=0)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--channels_last", action="store_true")
    p.add_argument("--verify_sync", action="store_true")
    p.add_argument("--log_every", type=int, default=0)
    p.add_argument("--dist_timeout", type=float, default=1800)
    p.add_argument("--fail_at_step", type=int)
    p.add_argument("--fail_rank", type=int)
    p.add_argument("--pin_memory", action="store_true",
                   help="page-locked host batches, copied without blocking (as ddp_resnet on CUDA)")
    p.add_argument("--compile", action="store_true", help="torch.compile the DDP model (2.x)")
    p.add_argument("--profile", action="store_true",
                   help="profile 5 steps of the second epoch (torch.profiler) and print the "
                        "top kernels on rank 0")
    a = p.parse_args()
    if a.syn_learnable:
        a.use_syn = True
    if a.num_classes is None:
        a.num_classes = 1000 if a.use_syn and not a.syn_learnable else 10
    for name in ["batch_size", "num_epochs", "steps_syn", "image_size"]:
        if getattr(a, name) <= 0:
            p.exit(EXIT_USAGE, f"reference_ddp.py: --{name}={getattr(a, name)}: must be positive\n")
    if a.backend == "nccl" and a.device == "cpu":
        p.exit(EXIT_USAGE, "reference_ddp.py: --device=cpu: NCCL reduces CUDA tensors only\n")
    if a.device == "auto":
        a.device = "cuda" if a.backend == "nccl" else "cpu"
    if a.device == "cuda" and not torch.cuda.is_available():
        p.exit(EXIT_USAGE, "reference_ddp.py: no CUDA device; use --backend=gloo --device=cpu\n")
    return a


def generator(seed):
    return torch.Generator().manual_seed(seed)


class FixedSynthetic(torch.utils.data.Dataset):
    """The Python example's data: one random batch, label 0, for every step."""

    def __init__(self, size, a):
        self.size = size
        self.images = torch.rand((a.batch_size, 3, a.image_size, a.image_size),
                                 generator=generator(a.random_seed))

    def __len__(self):
        return self.size

    def batch(self, indices, epoch):
        n = min(len(indices), self.images.shape[0])
        return self.images[:n], torch.zeros(n, dtype=torch.long)


class LearnableSynthetic:
    """Sample i: label i % C, image 0.5 * template[label] + 0.5 * noise_i (as ddp_resnet)."""

    def __init__(self, size, a):
        self.size, self.a = size, a
        s = a.image_size
        self.templates = [
            F.interpolate(torch.rand((1, 3, 4, 4), generator=generator(a.random_seed + c)),
                          size=(s, s), mode="nearest")[0]
            for c in range(a.num_classes)]

    def __len__(self):
        return self.size

    def batch(self, indices, epoch):
        s, seed, c = self.a.image_size, self.a.random_seed, self.a.num_classes
        images = torch.stack([
            self.templates[i % c] * 0.5 +
            torch.rand((3, s, s), generator=generator(seed * 1000003 + i + 1000)) * 0.5
            for i in indices])
        return images, torch.tensor([i % c for i in indices], dtype=torch.long)


class Cifar10:
    """CIFAR-10 binary batches; RandomCrop(32, padding=4) and horizontal flips."""

    def __init__(self, data_dir, seed):
        files = [os.path.join(data_dir, f"data_batch_{i}.bin") for i in range(1, 6)]
        files = [f for f in files if os.path.isfile(f)]
        if not files:
            say(f"reference_ddp.py: --data_dir={data_dir}: no CIFAR-10 training batches")
            sys.exit(EXIT_USAGE)
        raw = np.concatenate([np.fromfile(f, dtype=np.uint8).reshape(-1, 3073) for f in files])
        self.labels = torch.from_numpy(raw[:, 0].astype(np.int64))
        self.images = torch.from_numpy(raw[:, 1:].reshape(-1, 3, 32, 32).copy())
        self.seed = seed

    def __len__(self):
        return self.images.shape[0]

    def batch(self, indices, epoch):
        idx = torch.tensor(indices, dtype=torch.long)
        images = self.images[idx].float().div_(255.0)
        padded = F.pad(images, (4, 4, 4, 4))
        g = generator(self.seed * 7919 + epoch)
        for k in range(len(indices)):
            dy, dx = (int(v) for v in torch.randint(0, 9, (2,), generator=g))
            crop = padded[k, :, dy:dy + 32, dx:dx + 32]
            images[k] = crop.flip(2) if torch.rand((), generator=g) < 0.5 else crop
        return (images - CIFAR_MEAN) / CIFAR_STD, self.labels[idx]


def checksum_and_digest(model):
    """Sum of all parameters in double, and a 64-bit digest of their bytes (SHA-256 here, for
    speed in Python; ddp_resnet uses FNV-1a, so compare digests within one program only)."""
    total, h = 0.0, hashlib.sha256()
    for p in model.parameters():
        cpu = p.detach().cpu().contiguous()
        total += cpu.double().sum().item()
        h.update(cpu.view(-1).view(torch.uint8).numpy().tobytes())
    return total, int.from_bytes(h.digest()[:8], "big")


def start_profiler(a, epoch, rank):
    if not a.profile or epoch != 1 or rank != 0:
        return None
    activities = [torch.profiler.ProfilerActivity.CPU]
    if a.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(activities=activities)
    profiler.__enter__()
    return profiler


def stop_profiler(profiler, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    profiler.__exit__(None, None, None)
    say("profile of 5 steps (rank 0):")
    averages = profiler.key_averages()
    if device.type != "cuda":
        say(averages.table(sort_by="self_cpu_time_total", row_limit=25))
        return
    try:  # torch 2.4 renamed cuda_time to device_time
        say(averages.table(sort_by="self_device_time_total", row_limit=25))
    except (AttributeError, KeyError, ValueError):
        say(averages.table(sort_by="self_cuda_time_total", row_limit=25))


def save(path, model, optimizer, state):
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp.{os.getpid()}"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), **state}, tmp)
    os.replace(tmp, path)


def main():
    a = parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    device = torch.device("cpu")
    if a.device == "cuda":  # as ddp_resnet: Gloo ranks beyond the GPU count share them
        device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(a.random_seed)
    model = getattr(torchvision.models, a.arch)(num_classes=a.num_classes).to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=a.dist_timeout))
    optimizer = torch.optim.SGD(model.parameters(), lr=a.learning_rate, momentum=0.9, weight_decay=1e-5)

    syn_size = a.steps_syn * a.batch_size * world
    if a.syn_learnable:
        data = LearnableSynthetic(syn_size, a)
    elif a.use_syn:
        data = FixedSynthetic(syn_size, a)
    else:
        data = Cifar10(a.data_dir, a.random_seed)
    if a.pin_memory and device.type == "cuda" and isinstance(data, FixedSynthetic):
        data.images = data.images.pin_memory()
    sampler = DistributedSampler(range(len(data)), num_replicas=world, rank=rank,
                                 shuffle=not (a.use_syn and not a.syn_learnable), seed=a.random_seed)
    steps_per_epoch = math.ceil(len(sampler) / a.batch_size)
    path = os.path.join(a.model_dir, a.model_filename)
    epoch, epoch_step, global_step = 0, 0, 0
    if (a.resume or restart > 0) and os.path.exists(path):
        ckpt = torch.load(path, map_location=device)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        epoch, epoch_step, global_step = ckpt["epoch"], ckpt["epoch_step"], ckpt["global_step"]
        if epoch_step >= steps_per_epoch:
            epoch, epoch_step = epoch + 1, 0
        say(f"Local Rank: {local_rank}, resumed from {path}: epoch {epoch}, step {epoch_step}, "
            f"global step {global_step}")
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    step_model = torch.compile(ddp) if a.compile else ddp
    if rank == 0:
        say(f"reference_ddp.py: {a.arch} ({sum(p.numel() for p in model.parameters())} parameters, "
            f"{a.num_classes} classes), {a.batch_size} x {world} ranks, backend {a.backend}, "
            f"device {device}, {a.precision}, {torch.get_num_threads()} intra-op threads, "
            f"{len(data)} samples/epoch, {steps_per_epoch} steps/epoch, restart {restart}")
    fail_rank = world - 1 if a.fail_rank is None else a.fail_rank
    ddp.train()
    times = []
    while epoch < a.num_epochs:
        say(f"Local Rank: {local_rank}, Epoch: {epoch}, Training ...")
        sampler.set_epoch(epoch)
        indices = list(sampler)
        start, first = time.time(), epoch_step
        profiler = start_profiler(a, epoch, rank)
        while epoch_step < steps_per_epoch:
            if a.fail_at_step == global_step and restart == 0 and rank == fail_rank:
                print(f"reference_ddp.py: injected failure (--fail_at_step {global_step}) on rank "
                      f"{rank}, attempt 0: exiting with {EXIT_INJECTED}", file=sys.stderr, flush=True)
                sys.exit(EXIT_INJECTED)
            images, labels = data.batch(indices[epoch_step * a.batch_size:(epoch_step + 1) * a.batch_size], epoch)
            if a.pin_memory and device.type == "cuda" and not images.is_pinned():
                images, labels = images.pin_memory(), labels.pin_memory()
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            if a.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = F.cross_entropy(step_model(images), labels)
            loss.backward()
            optimizer.step()
            epoch_step, global_step = epoch_step + 1, global_step + 1
            if profiler is not None and epoch_step - first == 5:
                stop_profiler(profiler, device)
                profiler = None
            if a.log_every and global_step % a.log_every == 0:
                mean = loss.detach().double().cpu()
                dist.all_reduce(mean)
                if rank == 0:
                    say(f"step: {global_step}, loss: {mean.item() / world:.6f}")
            if a.checkpoint_every and global_step % a.checkpoint_every == 0 and rank == 0:
                os.makedirs(a.model_dir, exist_ok=True)
                save(path, model, optimizer, {"epoch": epoch, "epoch_step": epoch_step, "global_step": global_step})
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed, steps = time.time() - start, epoch_step - first
        if rank == 0 and steps:
            say(f"num_steps_per_gpu: {steps}, avg_step_time: {elapsed / steps:.4f}")
            say(f"samples_per_sec: {a.batch_size * world * steps / elapsed:.1f}")
        times.append(elapsed)
        epoch, epoch_step = epoch + 1, 0
    if rank == 0 and len(times) > 1:
        say(f"Average epoch time: {sum(times[1:]) / (len(times) - 1):.4f}")
    if a.verify_sync:
        total, digest = checksum_and_digest(model)
        mine = torch.tensor([total, float(digest >> 32), float(digest & 0xFFFFFFFF)], dtype=torch.float64)
        everyone = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine.to(device) if device.type == "cuda" else mine)
        if any(not torch.equal(e.cpu(), everyone[0].cpu()) for e in everyone):
            print(f"reference_ddp.py: parameters differ between ranks: {[e.tolist() for e in everyone]}",
                  file=sys.stderr, flush=True)
            sys.exit(EXIT_OUT_OF_SYNC)
        if rank == 0:
            say(f"param_checksum: {total:.17g} (in sync across {world} ranks)")
            say(f"param_digest: {digest:016x}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
