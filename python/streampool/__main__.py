# python -m streampool COMMAND [options] — runs streampool-bench, the comparison harness that the
# wheel installs next to this interpreter's scripts, with the same arguments, and exits with its
# status: `python -m streampool tune --trace run.pickle`, `... config`, `... latency`, `... replay`,
# `... compare`, `... workload` (every command of `streampool-bench --help`). Useful where the
# environment's bin/ is not on PATH. Which streampool-bench, and what happens without one (exit 2,
# one line saying how to get it): _bench.py.
import sys

from ._bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
