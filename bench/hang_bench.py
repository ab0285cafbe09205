#!/usr/bin/env python3
"""Figure 10, hangs: how soon ddprun's --hang-timeout gives its verdict after a job stops making
progress, how long taking every rank's stack takes (Python and native workers), and what
torchrun 1.13 reports on the same hung job within a bounded wait.

Appends one JSON series per line to --results (bench/results.hpp's format). Times come from
ddprun's --events-file (CLOCK_MONOTONIC) and from the workers' own last line, which carries
time.monotonic() (the same clock): the onset of the hang is the last line any rank printed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def run_ddprun(args, ddprun, extra_env, bound):
    with tempfile.TemporaryDirectory(prefix="ddprun-hang-bench.") as tmp:
        events = os.path.join(tmp, "events.jsonl")
        cmd = [ddprun, f"--events-file={events}", f"--log-dir={tmp}/logs",
               "--log-level=warn"] + args
        env = dict(os.environ, **extra_env)
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=bound)
        if p.returncode != 122:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}, not 122:\n{p.stderr[-2000:]}")
        evs = [json.loads(line) for line in open(events)]
        onsets = [float(m) for m in re.findall(r"ready at (\d+\.\d+)", p.stdout + p.stderr)]
        return evs, onsets


def series(figure, case, metric, subject, unit, samples, note, target_max=None,
           target_text="", compare_with=""):
    s = {"figure": figure, "case": case, "metric": metric, "subject": subject, "unit": unit,
         "lower_is_better": True, "samples": samples, "note": note, "measured": bool(samples),
         "compare_with": compare_with, "target_vs": "", "target_ratio": 0,
         "target_text": target_text}
    if target_max is not None:
        s["target_max"] = target_max
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--script", required=True, help="tests/python/hang.py")
    ap.add_argument("--results", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--timeout", type=float, default=3.0, help="--hang-timeout of the verdict runs")
    ap.add_argument("--torchrun-wait", type=float, default=30.0)
    a = ap.parse_args()
    out = []
    py_env = {"PYTHON_EXEC": a.python, "HANG_MODE": "sleep"}

    # The verdict: 3 ranks, rank 1 out of step, the others in all_reduce.
    verdict, capture3 = [], []
    for _ in range(a.runs):
        evs, onsets = run_ddprun([f"--nproc-per-node=3", f"--hang-timeout={a.timeout:g}",
                                  a.script], a.ddprun, py_env, 300)
        hang = next(e for e in evs if e["event"] == "hang")
        verdict.append(hang["mono"] - (max(onsets) + a.timeout))
        capture3.append(next(e for e in evs if e["event"] == "stacks")["seconds"])
    out.append(series(10, "3 Python ranks, one out of step", "verdict after onset + timeout",
                      "ddprun", "s", verdict,
                      f"--hang-timeout={a.timeout:g}; onset = the last line any rank printed "
                      "(its time.monotonic()); verdict = the `hang` event",
                      target_max=2.0, target_text="<= 2 s"))

    # torchrun 1.13 on the same job: anything it says after the ranks' last lines, within a
    # bounded wait (its process group's own timeout is 30 minutes by default).
    tr_note = "not measured: torch.distributed.run is not importable"
    tr_samples = []
    if subprocess.run([a.python, "-c", "import torch.distributed.run"],
                      capture_output=True).returncode == 0:
        with tempfile.TemporaryDirectory(prefix="torchrun-hang-bench.") as tmp:
            log = open(os.path.join(tmp, "out"), "w+")
            port = 29000 + os.getpid() % 1000
            p = subprocess.Popen([a.python, "-m", "torch.distributed.run", "-r", "1", "-t", "1",
                                  "--nproc_per_node=3",
                                  f"--master_port={port}", a.script],
                                 stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **py_env),
                                 start_new_session=True)
            start = time.monotonic()
            last_ready = None
            while time.monotonic() - start < a.torchrun_wait + 60:
                log.seek(0)
                text = log.read()
                if text.count("ready at") >= 3 and last_ready is None:
                    last_ready = time.monotonic()
                if last_ready and time.monotonic() - last_ready >= a.torchrun_wait:
                    break
                time.sleep(0.2)
            log.seek(0)
            # What it said after the ranks' last lines, its start-up banner aside.
            tail = log.read().split("ready at")[-1].split("\n", 1)[-1]
            after = "\n".join(l for l in tail.splitlines()
                              if l.strip() and not re.fullmatch(r"\*+", l.strip())
                              and "OMP_NUM_THREADS" not in l).strip()
            os.killpg(p.pid, 9)
            p.wait()
        if after:
            tr_note = f"said within {a.torchrun_wait:g} s: {after[:200]!r}"
        else:
            tr_samples = [a.torchrun_wait]
            tr_note = (f"nothing printed within the {a.torchrun_wait:g}-s bounded wait (a lower "
                       "bound; its first report comes at the process group's timeout, 1800 s "
                       "by default in torch 1.13)")
    out.append(series(10, "3 Python ranks, one out of step", "time to any report",
                      f"torchrun (torch 1.13)", "s", tr_samples, tr_note, compare_with="none"))

    # Capture time: every rank's stack, Python (py-bt + all threads) and native (all threads).
    for n in a.ranks:
        py, native = [], []
        for _ in range(a.runs):
            # Long enough that every rank has imported torch and blocked before the verdict
            # (n imports share the cores), so the capture is timed on a quiet machine.
            evs, _ = run_ddprun([f"--nproc-per-node={n}", f"--hang-timeout={4 + 1.5 * n:g}",
                                 a.script], a.ddprun, dict(py_env, HANG_RANK="0"), 300)
            py.append(next(e for e in evs if e["event"] == "stacks")["seconds"])
            evs, _ = run_ddprun([f"--nproc-per-node={n}", "--hang-timeout=1", "--no-python",
                                 "sleep", "600"], a.ddprun, {}, 300)
            native.append(next(e for e in evs if e["event"] == "stacks")["seconds"])
        target = dict(target_max=3.0, target_text="<= 3 s") if n == 8 else {}
        out.append(series(10, f"stacks of {n} ranks", "capture time", "ddprun, Python (torch 1.13)",
                          "s", py, "gdb -batch, one per core, each attaching to its share of "
                          "the ranks: every Python thread's frames and every thread's native "
                          "frames (no shared-library symbols)", compare_with="none", **target))
        out.append(series(10, f"stacks of {n} ranks", "capture time", "ddprun, native (sleep)",
                          "s", native, "gdb -batch per rank, all at once: every thread's native "
                          "frames",
                          compare_with="none"))
    with open(a.results, "a") as f:
        for s in out:
            f.write(json.dumps(s) + "\n")
            print(f"   {s['case']}: {s['subject']}: {s['metric']}: "
                  f"{sorted(s['samples'])} {s['unit']} {s['note'] if not s['samples'] else ''}")


if __name__ == "__main__":
    sys.exit(main())
