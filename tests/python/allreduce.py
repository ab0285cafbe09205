"""A torchrun-style script: gloo process group over env://, one all_reduce, checked.

Run under ddprun (or torchrun). Prints one line per rank; exits non-zero on a wrong sum.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> int:
    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    print(f"rank {rank}/{world} local {os.environ['LOCAL_RANK']} "
          f"group {os.environ['GROUP_RANK']} sum {t.item():g} expected {expected:g}", flush=True)
    if os.environ.get("ALLREDUCE_FAIL_RANK") == str(rank) and \
            os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
        raise RuntimeError(f"injected failure on rank {rank}")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if t.item() == expected else 1


if __name__ == "__main__":
    sys.exit(main())
