"""torch's own TCPStore client against a store it does not host: every call a worker's
store sees, each answer checked. Usage: torch_store_client.py HOST PORT. Exits 0 when all
hold, 1 with the first that did not."""
import sys
from datetime import timedelta

import torch.distributed as dist


def expect(what, got, want):
    if got != want:
        print(f"{what}: got {got!r}, expected {want!r}", flush=True)
        sys.exit(1)


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    # As torch's env:// does with TORCHELASTIC_USE_AGENT_STORE=True: a client, never a server.
    store = dist.TCPStore(host, port, 2, False, timedelta(seconds=30))
    store.set("a", "1")
    expect("get", store.get("a"), b"1")
    expect("add", store.add("n", 5), 5)
    expect("add again", store.add("n", -2), 3)
    expect("get of a counter", store.get("n"), b"3")
    expect("compare_set, missing key, empty expected", store.compare_set("c", "", "x"), b"x")
    expect("compare_set, missing key, other expected", store.compare_set("d", "y", "z"), b"y")
    expect("compare_set, match", store.compare_set("c", "x", "w"), b"w")
    expect("compare_set, no match", store.compare_set("c", "x", "v"), b"w")
    store.set("bin", b"\x00\xff")
    expect("binary value", store.get("bin"), b"\x00\xff")
    store.wait(["a", "n"], timedelta(seconds=5))
    try:
        store.wait(["never"], timedelta(milliseconds=300))
        print("wait for a missing key returned", flush=True)
        return 1
    except RuntimeError as e:
        expect("wait's timeout", "imeout" in str(e), True)
    expect("delete_key", store.delete_key("a"), True)
    expect("delete_key, missing", store.delete_key("a"), False)
    # init/ from the client's join, n, c, bin: d was never stored.
    expect("num_keys", store.num_keys(), 4)
    prefixed = dist.PrefixStore("/worker/attempt_0", store)
    prefixed.set("k", "v")
    expect("prefixed get", prefixed.get("k"), b"v")
    expect("prefix seen by the store", store.get("/worker/attempt_0/k"), b"v")
    print("all calls answered as torch's own store answers them", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
