#!/usr/bin/env python3
"""Figure 15, the node check: what --node-check adds to a job's start, with its links measured,
for nodes in network namespaces (each with its own address, joined by a bridge) and for many
agents on loopback; and how often a node whose link tc slowed is named, against clean runs.

Appends one JSON series per line to --results (bench/results.hpp's format). The time is the
check's own, from the agents' --events-file (`node_check`'s seconds, the slowest node's): the
check runs on each node between the first rendezvous and the first workers, so that is what it
adds to the start. The detection counts come from tests/netns/node_check_links.sh.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile


def series(case, metric, subject, unit, samples, note, target_max=None, target_text=""):
    s = {"figure": 15, "case": case, "metric": metric, "subject": subject, "unit": unit,
         "lower_is_better": True, "samples": samples, "note": note, "measured": bool(samples),
         "compare_with": "", "target_vs": "", "target_ratio": 0, "target_text": target_text}
    if target_max is not None:
        s["target_max"] = target_max
    return s


def found(runs):
    """What the runs named, for the note: a clean machine names nothing."""
    named = [f for _, findings in runs for f in findings]
    return "nothing named" if not named else f"named {len(named)}: " + "; ".join(named[:3])


def run_job(ddprun, nodes, wrap, addr, master, port, mode, bound, mib=4):
    """One job of `nodes` agents; returns the slowest node's check seconds and node 0's findings."""
    with tempfile.TemporaryDirectory(prefix="ddprun-node-check-bench.") as tmp:
        procs = []
        for i in range(nodes):
            events = os.path.join(tmp, f"events{i}.jsonl")
            cmd = wrap(i) + [ddprun, f"--nnodes={nodes}", f"--node-rank={i}",
                             f"--master-addr={master}", f"--master-port={port}",
                             f"--local-addr={addr(i)}", f"--node-check={mode}", f"--node-check-mib={mib}",
                             f"--events-file={events}", "--log-level=warn", "--no-python", "true"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                          stderr=open(os.path.join(tmp, f"node{i}.log"), "w")))
        codes = [p.wait(timeout=bound) for p in procs]
        if any(codes):
            bad = next(i for i, c in enumerate(codes) if c)
            raise RuntimeError(f"node {bad} exited {codes[bad]}:\n"
                               + open(os.path.join(tmp, f"node{bad}.log")).read()[-2000:])
        slowest, findings = 0.0, []
        for i in range(nodes):
            for line in open(os.path.join(tmp, f"events{i}.jsonl")):
                e = json.loads(line)
                if e["event"] == "node_check":
                    slowest = max(slowest, e["seconds"])
                    if i == 0:
                        findings = [f"node {f['node']}: {f['what']}" for f in e["findings"]]
        return slowest, findings


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--cluster", required=True, help="scripts/netns-cluster.sh")
    ap.add_argument("--links-test", required=True, help="tests/netns/node_check_links.sh")
    ap.add_argument("--results", required=True)
    ap.add_argument("--netns-nodes", type=int, default=64)
    ap.add_argument("--loopback-agents", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--detection-runs", type=int, default=20)
    a = ap.parse_args()
    out = []

    tag = f"nb{os.getpid()}"
    n = a.netns_nodes
    subprocess.run([a.cluster, "down", tag], check=True)
    try:
        subprocess.run([a.cluster, "up", tag, str(n)], check=True)
        addrs = [subprocess.run([a.cluster, "addr", tag, str(i + 1)], check=True,
                                capture_output=True, text=True).stdout.strip() for i in range(n)]
        wrap = lambda i: [a.cluster, "exec", tag, str(i + 1)]
        runs = [run_job(a.ddprun, n, wrap, lambda i: addrs[i], addrs[0], 29500, "warn", 600)
                for _ in range(a.runs)]
    finally:
        subprocess.run([a.cluster, "down", tag])
    out.append(series(f"{n} nodes, network namespaces", "time the check adds to the start",
                      "ddprun --node-check=warn --node-check-mib=4", "s", [r[0] for r in runs],
                      "the slowest node's check: its look at itself, two pairings of 4 MiB "
                      "each way and three exchanges through the store; " + found(runs),
                      3.0, "<= 3 s"))

    # Every agent a process of its own on this machine's few cores: the links' figures say
    # more about the scheduler than about loopback, which the smaller sizes show.
    n = a.loopback_agents
    for mib in (4, 1, 0):
        runs = [run_job(a.ddprun, n, lambda i: [], lambda i: "127.0.0.1", "127.0.0.1", 29507,
                        "warn", 900, mib) for _ in range(a.runs)]
        what = {4: "two pairings of 4 MiB each way", 1: "two pairings of 1 MiB each way",
                0: "no links: the look at itself and one exchange"}[mib]
        out.append(series(f"{n} agents, loopback", "time the check adds to the start",
                          f"ddprun --node-check=warn --node-check-mib={mib}", "s",
                          [r[0] for r in runs], f"{what}; " + found(runs),
                          5.0 if mib == 4 else None, "<= 5 s" if mib == 4 else ""))

    p = subprocess.run([a.links_test, a.ddprun, str(a.detection_runs)], capture_output=True,
                       text=True, timeout=3600)
    named = re.search(r"slowed: node \d+ named alone in (\d+) of (\d+) runs", p.stdout)
    clean = re.search(r"clean: nothing named in (\d+) of (\d+) runs", p.stdout)
    if not named or not clean:
        raise RuntimeError(f"{a.links_test} printed no counts (exit {p.returncode}):\n"
                           + p.stdout[-3000:] + p.stderr[-2000:])
    missed = int(named.group(2)) - int(named.group(1))
    false_named = int(clean.group(2)) - int(clean.group(1))
    out.append(series("5 nodes, one link slowed to 100 Mbit/s both ways (tc tbf)",
                      "runs the slowed node was not named alone",
                      "ddprun --node-check=warn --node-check-mib=4", "runs", [missed],
                      f"of {named.group(2)} runs", 1.0, "<= 1 of 20"))
    out.append(series("5 nodes, nothing slowed", "runs that named anything",
                      "ddprun --node-check=warn --node-check-mib=4", "runs", [false_named],
                      f"of {clean.group(2)} runs", 0.0, "0 of 20"))
    with open(a.results, "a") as f:
        for s in out:
            f.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
