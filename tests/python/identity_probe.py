"""What a worker sees of its process, as JSON: the warm standby test starts it cold and from a
standby and compares the two. Writes <restart>.<rank>.json into the directory $PROBE_OUT.
On the first attempt rank 1 fails through torch's @record (its error file is compared too).
"""
import sys

TORCH_PRELOADED = "torch" in sys.modules  # before this script imports anything

import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Squares(Dataset):
    """Defined in __main__: the spawn context's workers must find it there."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return i * i


QUICK = os.environ.get("PROBE_QUICK") == "1"  # no DataLoader (its spawn workers take seconds)


def loaded_by(context):
    loader = DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context=context)
    return sorted(int(x) for batch in loader for x in batch)


def descriptor(fd):
    target = os.readlink(f"/proc/self/fd/{fd}")
    return target.split(":")[0] if target.startswith(("pipe:", "socket:", "anon_inode:")) else target


def handler_name(sig):
    h = signal.getsignal(sig)
    return {signal.SIG_DFL: "default", signal.SIG_IGN: "ignored", None: "none",
            signal.default_int_handler: "KeyboardInterrupt"}.get(h, repr(h))


def snapshot():
    main = sys.modules["__main__"]
    fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    return {
        "env": {k: v for k, v in os.environ.items() if k != "DDPRUN_GUARD"},
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "executable": sys.executable,
        "cwd": os.getcwd(),
        "file": __file__,
        "name": __name__,
        "path": sys.path,
        "flags": list(sys.flags),
        "main_names": sorted(k for k in vars(main) if k.startswith("__")),
        "loader": [type(main.__loader__).__name__, getattr(main.__loader__, "path", None)],
        "spec": main.__spec__ and [main.__spec__.name, main.__spec__.origin],
        "package": main.__package__,
        "rlimits": {name: resource.getrlimit(getattr(resource, name))
                    for name in dir(resource) if name.startswith("RLIMIT_")},
        "affinity": sorted(os.sched_getaffinity(0)),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "umask": os.umask(os.umask(0)),
        "own_group": os.getpgid(0) == os.getpid(),
        "parent": open(f"/proc/{os.getppid()}/comm").read().strip(),
        "signals": {int(s): handler_name(s)
                    for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "fds": {fd: descriptor(fd) for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")},
        "stdout": [sys.stdout.line_buffering, sys.stdout.write_through, sys.stdout.encoding],
        "torchelastic": dist.is_torchelastic_launched(),
        "loader_fork": None if QUICK else loaded_by("fork"),
        "loader_spawn": None if QUICK else loaded_by("spawn"),
        "modules_cuda_initialized": torch.cuda.is_initialized(),
    }


# A script may take any name, builtins' too: how a standby ends the program must not depend on
# them.
isinstance = BaseException = SystemExit = None


@record
def main():
    out = os.path.join(os.environ["PROBE_OUT"],
                       f"{os.environ['TORCHELASTIC_RESTART_COUNT']}.{os.environ['RANK']}.json")
    state = snapshot()
    state["torch_preloaded"] = TORCH_PRELOADED
    with open(out + ".tmp", "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    os.replace(out + ".tmp", out)
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
        # Rank 0 writes its view first: the failure stops it.
        rank0 = os.path.join(os.environ["PROBE_OUT"], "0.0.json")
        deadline = time.monotonic() + 120
        while not os.path.exists(rank0) and time.monotonic() < deadline:
            time.sleep(0.01)
        raise ValueError("the planned failure of rank 1")


if __name__ == "__main__":
    main()
