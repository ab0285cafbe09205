"""The training script of Figure 13: what a person waits for after a failure.

A small DDP model over Gloo, init_process_group("gloo") with env://, a checkpoint every 5 steps,
STEPS steps. On the first attempt rank 1 SIGKILLs itself at step 20. Each phase is stamped
(CLOCK_MONOTONIC seconds, the clock of ddprun's --events-file) in $BENCH_STAMP_DIR as
<phase>.<restart count>.<rank>: start (before `import torch`), imported, joined (after
init_process_group), step (after the attempt's first training step), and kill. With
BENCH_RANK0_HOSTS_STORE=<port> the workers ignore the launcher's store and rank 0 hosts one at
that port (TORCHELASTIC_USE_AGENT_STORE=False): the path without the workers' store.
"""
import os
import signal
import time


def stamp(phase):
    path = os.path.join(os.environ["BENCH_STAMP_DIR"],
                        f"{phase}.{os.environ['TORCHELASTIC_RESTART_COUNT']}.{os.environ['RANK']}")
    with open(path, "w") as f:
        f.write(f"{time.clock_gettime(time.CLOCK_MONOTONIC):.9f}\n")


stamp("start")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

STEPS, KILL_AT, CHECKPOINT_EVERY = 25, 20, 5


def main():
    stamp("imported")
    rank0_store_port = os.environ.get("BENCH_RANK0_HOSTS_STORE")
    if rank0_store_port:
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
        os.environ["MASTER_PORT"] = rank0_store_port
    dist.init_process_group("gloo")
    stamp("joined")
    rank, attempt = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    checkpoint = os.path.join(os.environ["BENCH_STAMP_DIR"], "checkpoint.pt")
    first = 0
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        first = state["step"]
    data = torch.randn(16, 32), torch.randn(16, 1)
    for step in range(first, STEPS):
        if attempt == 0 and rank == 1 and step == KILL_AT:
            stamp("kill")
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(data[0]), data[1]).backward()
        opt.step()
        if step == first:
            stamp("step")
        if rank == 0 and (step + 1) % CHECKPOINT_EVERY == 0:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "step": step + 1}, checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
