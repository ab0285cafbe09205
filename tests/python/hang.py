"""Jobs that stop making progress, for ddprun's --hang-timeout and FileTimer tests.

HANG_MODE picks the scenario; HANG_RANK is the rank out of step (default 1). A scenario hangs
only in the attempts before HANG_UNTIL_RESTART (default: every attempt), so that a restart can
cure it.
"""
import datetime
import os
import signal
import sys
import threading
import time

# Importing torch and joining the process group take seconds without a word, longer on a loaded
# machine: a line every 0.2 s until then keeps a short --hang-timeout for the hang under test.
_started = threading.Event()


def _starting():
    while not _started.wait(0.2):
        print(f"rank {os.environ['RANK']} starting", flush=True)


threading.Thread(target=_starting, daemon=True).start()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402

MODE = os.environ.get("HANG_MODE", "sleep")
ODD = int(os.environ.get("HANG_RANK", "1"))
HANGS = int(os.environ["TORCHELASTIC_RESTART_COUNT"]) < int(
    os.environ.get("HANG_UNTIL_RESTART", "1000"))


def load_batch(rank):
    if rank == ODD and HANGS:
        time.sleep(3600)  # out of step: never reaches the collective
    return torch.ones(4)


def step(t):
    dist.all_reduce(t)


@record
def main():
    if MODE in ("chatty", "timer", "timed_step"):
        _started.set()
    if MODE == "chatty":
        for i in range(int(os.environ.get("CHATTY_LINES", "8"))):
            print(f"tick {i}", flush=True)
            time.sleep(0.5)
        return
    if MODE == "timer":
        import torch.distributed.elastic.timer as timer
        timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
        rank = int(os.environ["RANK"])
        print(f"rank {rank} enters the timed block", flush=True)
        with timer.expires(after=2):
            time.sleep(3600 if rank == ODD else 0.1)
        print(f"rank {rank} left the timed block", flush=True)
        time.sleep(3600)
    if MODE == "timed_step":
        # A long silent step inside a FileTimer block that does end in time.
        import torch.distributed.elastic.timer as timer
        timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
        with timer.expires(after=60):
            time.sleep(float(os.environ.get("STEP_SECONDS", "8")))
        print("step done", flush=True)
        return
    timeout = float(os.environ.get("PG_TIMEOUT", "1800"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    _started.set()
    rank = dist.get_rank()
    # The last line before blocking: its monotonic time is the onset of a hang (bench/hang_bench.py).
    print(f"rank {rank} ready at {time.monotonic():.6f}", flush=True)
    t = torch.ones(4)
    if MODE == "kill" and rank == ODD:
        os.kill(os.getpid(), signal.SIGKILL)
    if MODE == "sleep":
        t = load_batch(rank)
    if MODE == "mismatch" and rank == ODD and HANGS:
        # Every rank blocked: this one in a broadcast from a rank that never sends it, the
        # others in the all_reduce this one never joins.
        dist.broadcast(t, src=(rank + 1) % dist.get_world_size())
    step(t)
    print(f"rank {rank} done {t[0].item():g}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
