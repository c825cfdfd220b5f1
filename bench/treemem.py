"""Peak memory of a command summed over its whole process tree.

A check runs its ONNX Runtime jobs in child processes, so the parent's own
peak (what `/usr/bin/time` reports) says nothing; the number that matters on
a CI runner is the sum of resident memory over every process alive at once.
This samples /proc every 10 ms (Linux only), summing VmRSS over the command
and all its descendants, and keeps the highest sum.

    python3 bench/treemem.py CMD [ARGS...]   ->  prints wall seconds and peak MiB
"""
import os
import subprocess
import sys
import time


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                # The command name may hold spaces and parentheses: split after the last ')'.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(root: int) -> int:
    kids = _children()
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _rss_kib(pid)
        todo.extend(kids.get(pid, []))
    return total


def run(cmd, cwd=None, env=None, interval=0.01):
    """(wall seconds, peak MiB summed over the tree, returncode, stdout, stderr)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    # Drain the pipes on threads so a chatty command never blocks on a full pipe.
    import threading

    out: dict[str, str] = {}

    def drain(name, stream):
        out[name] = stream.read()

    ts = [threading.Thread(target=drain, args=(n, s)) for n, s in (("out", p.stdout), ("err", p.stderr))]
    for t in ts:
        t.start()
    while p.poll() is None:
        peak = max(peak, tree_rss_kib(p.pid))
        time.sleep(interval)
    for t in ts:
        t.join()
    return time.perf_counter() - t0, peak / 1024, p.returncode, out.get("out", ""), out.get("err", "")


if __name__ == "__main__":
    wall, peak, rc, _, err = run(sys.argv[1:])
    print(f"wall {wall:.2f} s  peak {peak:.0f} MiB (summed over the process tree)  rc {rc}")
    if rc and err:
        sys.stderr.write(err[-2000:])
