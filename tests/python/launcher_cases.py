#!/usr/bin/env python3
"""The worker of torchrun's launcher test cases as ported to ddprun
(tests/integration/test_torchrun_suite.cpp), and of the placement tests.

Without options it checks the variables torchrun gives every worker; then, by option: leaves an
empty file named after its rank (so a test counts the ranks that ran), fails, checks the
--local_rank argument torch.distributed.launch passes, joins a Gloo group through an init_method
or through Open MPI's variables, writes torch's is_torchelastic_launched(), or prints where it
runs. Only the options that need torch import it.
"""
import argparse
import ctypes
import os
import pathlib
import sys

TORCHRUN_VARIABLES = (
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE",
    "TEST_SENTINEL_PARENT",  # the test's own, which the agent must pass on
)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--touch-file-dir", "--touch_file_dir")
    p.add_argument("--fail", action="store_true", help="raise instead of touching the file")
    p.add_argument("--local-rank", "--local_rank", type=int, default=None,
                   help="passed by the launcher (--pass-local-rank); must equal LOCAL_RANK")
    p.add_argument("--expect-local-rank-arg", action="store_true")
    p.add_argument("--init-method", "--init_method", help="join a Gloo group through it")
    p.add_argument("--mpi", action="store_true",
                   help="join a Gloo group by OMPI_COMM_WORLD_RANK and _SIZE, as a script "
                        "written for mpirun does")
    p.add_argument("--out-file", "--out_file", help="write is_torchelastic_launched() there")
    p.add_argument("--outside-launcher", action="store_true",
                   help="run without a launcher: skip the check of its variables")
    p.add_argument("--print-devices", action="store_true",
                   help="print LOCAL_RANK and CUDA_VISIBLE_DEVICES (and the device count with CUDA)")
    p.add_argument("--print-placement", action="store_true",
                   help="print the CPUs, memory nodes and memory policy this process has")
    return p.parse_args()


def gloo_all_reduce(init_method, rank, world_size):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    # Each rank contributes a one-hot vector: the sum has a 1 per rank.
    t = F.one_hot(torch.tensor(dist.get_rank()), num_classes=dist.get_world_size())
    dist.all_reduce(t)
    if int(t.sum()) != world_size:
        raise RuntimeError(f"all_reduce gave {t.tolist()} for world size {world_size}")
    dist.destroy_process_group()
    print(f"rank {rank}/{world_size}: all_reduce done", flush=True)


def print_placement():
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    libc = ctypes.CDLL(None, use_errno=True)
    mode = ctypes.c_int(-1)
    mask = (ctypes.c_ulong * 16)()
    get_mempolicy = 239  # x86-64's system call number; libc has no wrapper
    if libc.syscall(get_mempolicy, ctypes.byref(mode), mask, 16 * 64, None, 0) != 0:
        mode.value = -ctypes.get_errno()
    nodes = [n for n in range(16 * 64) if mask[n // 64] >> (n % 64) & 1]
    print(f"local rank {os.environ['LOCAL_RANK']}: cpus={status['Cpus_allowed_list'].strip()} "
          f"mems={status['Mems_allowed_list'].strip()} policy={mode.value} "
          f"nodes={','.join(map(str, nodes))}", flush=True)


def main():
    args = parse_args()
    missing = [v for v in TORCHRUN_VARIABLES if v not in os.environ]
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > 1 and "OMP_NUM_THREADS" not in os.environ:
        missing.append("OMP_NUM_THREADS")
    if missing and not args.outside_launcher:
        sys.exit(f"launcher_cases.py: missing {', '.join(missing)}")
    if args.expect_local_rank_arg and args.local_rank != int(os.environ["LOCAL_RANK"]):
        sys.exit(f"launcher_cases.py: --local_rank={args.local_rank}, "
                 f"LOCAL_RANK={os.environ['LOCAL_RANK']}")
    if args.fail:
        raise RuntimeError("raising exception since --fail was given")
    if args.init_method:
        gloo_all_reduce(args.init_method, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    if args.mpi:
        master = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        gloo_all_reduce(master, int(os.environ["OMPI_COMM_WORLD_RANK"]),
                        int(os.environ["OMPI_COMM_WORLD_SIZE"]))
    if args.out_file:
        import torch.distributed as dist
        pathlib.Path(args.out_file).write_text(f"{dist.is_torchelastic_launched()}")
    if args.print_devices:
        line = (f"LOCAL_RANK={os.environ['LOCAL_RANK']} "
                f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}")
        if os.environ.get("PRINT_CUDA_DEVICE_COUNT"):
            import torch
            line += f" device_count={torch.cuda.device_count()}"
            if torch.cuda.device_count() == 1:
                line += f" device0={torch.cuda.get_device_properties(0).name}"
        print(line, flush=True)
    if args.print_placement:
        print_placement()
    if args.touch_file_dir:
        path = pathlib.Path(args.touch_file_dir) / os.environ["RANK"]
        path.touch()
        print(f"created {path}", flush=True)


if __name__ == "__main__":
    main()
