"""examples/sleep/compare.py OUT — judges the colocation runs of examples/sleep/run-gpu.sh: each
sleeping run (OUT/sleep, OUT/sleep-expandable) must give the reference's (OUT/nosleep) losses and
tokens bit for bit; prints and writes OUT/summary.md with the peak device memory in use of each run
against its two phases, and the time in sleep and wake per cycle. Exit status 1 on a mismatch."""

from __future__ import annotations

import json
import os
import sys

GIB = 2 ** 30


def load(out: str, name: str):
    path = os.path.join(out, name, "result.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def main() -> int:
    out = sys.argv[1]
    ref = load(out, "nosleep")
    if ref is None:
        print(f"no reference run in {out}/nosleep")
        return 1
    lines = ["| run | config | outputs | peak in use GiB | generator phase GiB | trainer phase GiB | "
             "sleep s/cycle | wake s/cycle | decode |", "|---|---|---|---|---|---|---|---|---|"]
    status = 0
    for name in ("nosleep", "sleep", "sleep-expandable"):
        r = load(out, name)
        if r is None:
            lines.append(f"| {name} | | missing | | | | | | |")
            status = 1
            continue
        same = all(a["losses"] == b["losses"] and a["tokens"] == b["tokens"] for a, b in zip(r["cycles"], ref["cycles"]))
        same = same and len(r["cycles"]) == len(ref["cycles"])
        if not same:
            status = 1
        n = max(1, len(r["cycles"]))
        sleep_s = sum(c["sleep_seconds"] for c in r["cycles"]) / n
        wake_s = sum(c["wake_seconds"] for c in r["cycles"]) / n
        lines.append(f"| {name} | {r['config'] or 'default'} | {'identical' if same else 'DIFFER'} | "
                     f"{r['peak_in_use_bytes'] / GIB:.2f} | {r['generator_phase_peak_bytes'] / GIB:.2f} | "
                     f"{r['trainer_phase_peak_bytes'] / GIB:.2f} | {sleep_s:.3f} | {wake_s:.3f} | {r['graph']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
