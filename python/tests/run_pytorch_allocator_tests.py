#!/usr/bin/env python3
"""Runs PyTorch's own allocator tests (its source tree's test/test_cuda.py; the wheel lacks it) on stock
PyTorch or with streampool installed as its CUDA allocator, and compares two runs:
  run_pytorch_allocator_tests.py TEST_CUDA_PY --mode stock|streampool [--config CONF] --out DIR [-k EXPR] [--jobs N]
  run_pytorch_allocator_tests.py TEST_CUDA_PY --list       (from the file's syntax tree: no torch needed)
  run_pytorch_allocator_tests.py --compare STOCK.json STREAMPOOL.json
Selected: TestCuda tests whose names hold one of KEYWORDS, all of ALL_CLASSES, TestCudaOptims' graph tests.
--config becomes PYTORCH_CUDA_ALLOC_CONF. pytest runs with PLUGIN (keeps those tests, records each outcome,
in streampool mode errors a test whose process lacks streampool) and SITECUSTOMIZE first on PYTHONPATH: with
STREAMPOOL_TEST_INSTALL=1 every Python process of the run, pytest and the children tests spawn, calls
streampool.install() right after it imports torch. A test that kills or hangs its process is recorded (crashed/timeout) and
the run resumes after it. DIR gets results.json ({test id: outcome}), meta.json, table.txt, log.txt.
Standard library only (pytest runs in the children); tests: python/tests/test_pytorch_runner_logic.py."""

from __future__ import annotations

import argparse, ast, json, os, shutil, signal, subprocess, sys, tempfile, threading, time  # noqa: E401
from collections import Counter
from pathlib import Path

KEYWORDS = ("graph", "memory", "mem", "oom", "out_of_memory", "fraction", "record_stream", "caching",
            "allocator", "stats", "cache", "snapshot", "pool", "segment", "expandable", "pinned", "host")
ALL_CLASSES = ("TestCudaMallocAsync", "TestCudaAllocator",  # the latter: the former's name after 2.11 (pytorch#176181)
               "TestBlockStateAbsorption", "TestMemPool", "TestCachingHostAllocatorCudaGraph")
KEYWORD_CLASSES = {"TestCuda": KEYWORDS, "TestCudaOptims": ("graph",)}
EXPANDING = {"parametrize", "optims", "dtypes", "ops"}  # decorators whose tests get name suffixes at run time
OK, BAD = ("passed", "xfailed"), ("failed", "error", "crashed", "timeout", "xpassed")
MAX_RESTARTS = 200


def selected(cls: str, name: str) -> bool:
    """Whether test `name` of class `cls` (as pytest sees it: instantiate_device_type_tests names a class's
    CUDA copy cls + "CUDA") is one of ours."""
    stem = cls[:-4] if cls.endswith("CUDA") else cls
    cls = stem if stem in KEYWORD_CLASSES or stem in ALL_CLASSES else cls
    words = KEYWORD_CLASSES.get(cls, ())
    return name.startswith("test") and (cls in ALL_CLASSES or any(w in name.lower() for w in words))


def split_id(test_id: str):
    """(class, test) of "file.py::Class::test", "Class::test" or "Class.test"."""
    parts = test_id.split("::") if "::" in test_id else test_id.rsplit(".", 1)
    return (parts[-2] if len(parts) > 1 else ""), parts[-1]


def _decorator(d) -> str:
    d = d.func if isinstance(d, ast.Call) else d
    return d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")


def ast_test_ids(source: str, filename: str = "test_cuda.py"):
    """The selected tests as the file writes them; '*' ends a name pytest sees with suffixes added
    (parametrized, or instantiated per device)."""
    tree = ast.parse(source)
    per_device = {c.args[0].id for c in ast.walk(tree) if isinstance(c, ast.Call) and c.args
                  and getattr(c.func, "id", "") == "instantiate_device_type_tests" and isinstance(c.args[0], ast.Name)}
    ids = []
    for node in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        cls = node.name + ("CUDA" if node.name in per_device else "")
        for fn in node.body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and selected(cls, fn.name):
                grows = node.name in per_device or bool({_decorator(d) for d in fn.decorator_list} & EXPANDING)
                ids.append(f"{filename}::{cls}::{fn.name}{'*' if grows else ''}")
    return ids


def counts_line(results: dict) -> str:
    c = Counter(results.values())
    skipped = sum(n for o, n in c.items() if o not in OK + BAD)
    return f"{sum(c[o] for o in OK)} passed, {sum(c[o] for o in BAD)} failed, {skipped} skipped"


def table(results: dict):
    return [f"{results[t]:<8} {t}" for t in sorted(results)]


def compare(stock: dict, streampool: dict):
    """regressions (ok on stock, failing with streampool), fixed (the reverse), lost (ok on stock,
    skipped or not run with streampool), and {outcome: (stock count, streampool count)}."""
    regressions = sorted(t for t, o in stock.items() if o in OK and streampool.get(t) in BAD)
    fixed = sorted(t for t, o in stock.items() if o in BAD and streampool.get(t) in OK)
    lost = sorted(t for t, o in stock.items() if o in OK and streampool.get(t) not in OK + BAD)
    cs, cp = Counter(stock.values()), Counter(streampool.values())
    return regressions, fixed, lost, {o: (cs[o], cp[o]) for o in sorted(set(cs) | set(cp))}


def compare_report(stock: dict, streampool: dict):
    regressions, fixed, lost, counts = compare(stock, streampool)
    lines = [f"{'outcome':<10}{'stock':>8}{'streampool':>12}"]
    lines += [f"{o:<10}{a:>8}{b:>12}" for o, (a, b) in counts.items()]
    for title, ids in (("ok on stock, failing with streampool", regressions),
                       ("failing on stock, ok with streampool", fixed),
                       ("ok on stock, skipped or not run with streampool", lost)):
        lines += [f"\n{title} ({len(ids)}):"] + [f"  {streampool.get(t, 'absent'):<8} {t}" for t in ids]
    return lines + [f"\n{len(regressions)} tests ok on stock fail with streampool"]


PLUGIN = r'''
import json, os, time
import pytest
import run_pytorch_allocator_tests as runner

_INSTALL, _outcome = os.environ.get("STREAMPOOL_TEST_INSTALL") == "1", {}

try:  # test_cuda.py after 2.11 imports TEST_CUDAMALLOCASYNC from common_utils; 2.11's defines it in test_cuda.py
    import torch
    from torch.testing._internal import common_utils as _cu
    if not hasattr(_cu, "TEST_CUDAMALLOCASYNC"):  # also true for streampool's backend:cudaMallocAsync
        _cu.TEST_CUDAMALLOCASYNC = _cu.TEST_CUDA and torch.cuda.get_allocator_backend().endswith("cudaMallocAsync")
except ImportError:
    pass

def _event(**kw):
    with open(os.environ["STREAMPOOL_RUNNER_EVENTS"], "a") as f:
        f.write(json.dumps(kw) + "\n")

def pytest_sessionstart(session):
    if _INSTALL:
        try:
            import streampool
            _event(route=streampool.installed_route())
        except ImportError as e:  # then every test errors (_streampool_installed)
            _event(route=repr(e))

def pytest_collection_modifyitems(session, config, items):
    with open(os.environ["STREAMPOOL_RUNNER_DONE"]) as f:
        done = set(json.load(f))
    k, n = map(int, os.environ["STREAMPOOL_RUNNER_SHARD"].split("/"))
    mine = [i for i in items if i.cls is not None and runner.selected(i.cls.__name__, i.name)][k::n]
    keep = [i for i in mine if i.nodeid not in done]
    kept = set(map(id, keep))
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
    items[:] = keep

def pytest_runtest_logstart(nodeid, location):
    _event(start=nodeid, t=time.time())

def pytest_runtest_logreport(report):
    xfail = hasattr(report, "wasxfail")
    if report.when == "call" and report.passed:
        o = "xpassed" if xfail else "passed"
    elif report.failed:
        o = "failed" if report.when == "call" else "error"
    elif report.skipped:
        o = "xfailed" if xfail else "skipped"
    else:
        return
    if _outcome.get(report.nodeid) not in ("failed", "error"):
        _outcome[report.nodeid] = o

def pytest_runtest_logfinish(nodeid, location):
    _event(finish=nodeid, outcome=_outcome.get(nodeid, "error"))

@pytest.fixture(autouse=True)
def _streampool_installed():
    if _INSTALL:
        import streampool
        assert streampool.is_installed(), "streampool.install() has not run in this test process"
    yield
'''

SITECUSTOMIZE = r'''
# Written by run_pytorch_allocator_tests.py: with STREAMPOOL_TEST_INSTALL=1 each Python process installs
# streampool right after it imports torch (before anything can touch CUDA, and after the process has set
# its own allocator variables, as a program calling streampool.install() after `import torch` does).
import importlib.abc, importlib.machinery, importlib.util, os, sys

_here = os.path.dirname(os.path.abspath(__file__))
_others = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _others)
if _spec is not None and _spec.loader is not None:  # the sitecustomize this one shadows
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))


class _InstallAfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_torch = spec.loader.exec_module

        def exec_module(module):
            run_torch(module)
            import streampool
            try:
                streampool.install()
            except Exception as e:  # as in a program that calls install(): the process fails with it
                sys.stderr.write(f"run_pytorch_allocator_tests: streampool.install() failed in {sys.argv!r}: {e}\n")
                raise

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("STREAMPOOL_TEST_INSTALL") == "1" and "torch" not in sys.modules:
    sys.meta_path.insert(0, _InstallAfterTorch())
'''


def read_events(path: Path):
    """(route, {test id: outcome}, (id, start time) of a test started and not finished, or None)."""
    route, results, running = None, {}, None
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            e = json.loads(line)
        except ValueError:  # a line cut short by a kill
            continue
        route = e.get("route", route)
        running = (e["start"], e["t"]) if "start" in e else running
        if "finish" in e:
            results[e["finish"]], running = e["outcome"], None
    return route, results, running


def child_env(args, tmp: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in
           ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "STREAMPOOL_ALLOC_CONF", "STREAMPOOL_TEST_INSTALL")}
    env.update({"PYTORCH_CUDA_ALLOC_CONF": args.config} if args.config else {})
    if args.mode == "streampool":
        env.update({"STREAMPOOL_TEST_INSTALL": "1"}, **({"STREAMPOOL_TORCH_ROUTE": args.route} if args.route else {}))
    env["PYTHONPATH"] = os.pathsep.join([tmp] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_shard(k: int, n: int, args, env: dict, out: Path):
    """Runs shard k of n until pytest ends with no test left running; returns pytest's last exit code."""
    test_file = Path(args.test_file).resolve()
    events, done = out / f"events-{k}.jsonl", out / f"done-{k}.json"
    cmd = [args.python, "-m", "pytest", str(test_file), "-p", "streampool_runner_plugin", "-p", "no:cacheprovider",
           "-q", "--tb=short", "-rfE", "--rootdir", str(test_file.parent)] + (["-k", args.k] if args.k else [])
    for attempt in range(MAX_RESTARTS):
        done.write_text(json.dumps(sorted(read_events(events)[1])))
        shard_env = dict(env, STREAMPOOL_RUNNER_EVENTS=str(events), STREAMPOOL_RUNNER_DONE=str(done),
                         STREAMPOOL_RUNNER_SHARD=f"{k}/{n}")
        with open(out / f"log-{k}.txt", "a") as log:
            log.write(f"\n== shard {k}/{n}, attempt {attempt}: {' '.join(cmd)}\n")
            log.flush()
            p = subprocess.Popen(cmd, env=shard_env, stdout=log, stderr=subprocess.STDOUT, cwd=test_file.parent,
                                 start_new_session=True)
            timed_out = False
            while p.poll() is None:
                time.sleep(0.25)
                running = read_events(events)[2]
                if args.test_timeout and running and time.time() - running[1] > args.test_timeout:
                    os.killpg(p.pid, signal.SIGKILL)
                    timed_out = p.wait() is not None
        running = read_events(events)[2]
        if running is None:
            return p.returncode
        with open(events, "a") as f:  # the test that took its process down: the next attempt goes on after it
            f.write(json.dumps({"finish": running[0], "outcome": "timeout" if timed_out else "crashed"}) + "\n")
    return p.returncode


def run(args) -> int:
    out, n = Path(args.out), max(1, args.jobs)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("events-*.jsonl"), *out.glob("done-*.json"), *out.glob("log-*.txt")]:
        old.unlink()
    tmp, codes = tempfile.mkdtemp(prefix="streampool-pytorch-tests-"), [None] * n
    try:
        Path(tmp, "sitecustomize.py").write_text(SITECUSTOMIZE)
        Path(tmp, "streampool_runner_plugin.py").write_text(PLUGIN)
        shutil.copy(__file__, Path(tmp, "run_pytorch_allocator_tests.py"))
        env = child_env(args, tmp)
        threads = [threading.Thread(target=lambda k=k: codes.__setitem__(k, run_shard(k, n, args, env, out)))
                   for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results, routes = {}, set()
    for k in range(n):
        route, shard_results, _ = read_events(out / f"events-{k}.jsonl")
        results.update(shard_results)
        routes.add(str(route))
    (out / "log.txt").write_text("".join((out / f"log-{k}.txt").read_text() for k in range(n)))
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    meta = {"mode": args.mode, "config": args.config, "test_file": str(Path(args.test_file).resolve()), "k": args.k,
            "jobs": n, "pytest_exit_codes": codes, "streampool_route": sorted(routes)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out / "table.txt").write_text("\n".join(table(results)) + "\n")
    print("\n".join(table(results)))
    print("outcomes: " + ", ".join(f"{o} {c}" for o, c in sorted(Counter(results.values()).items())))
    print(f"mode {args.mode}, PYTORCH_CUDA_ALLOC_CONF={args.config!r}, streampool route {meta['streampool_route']}, "
          f"pytest exit codes {codes}, log {out / 'log.txt'}")
    if not results:
        print("no test ran: see the log")
        return 2
    print(counts_line(results))
    return 1 if any(o in BAD for o in results.values()) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("test_file", nargs="?", help="PyTorch's test/test_cuda.py")
    ap.add_argument("--mode", choices=("stock", "streampool"), default="stock")
    ap.add_argument("--config", default="", help="PYTORCH_CUDA_ALLOC_CONF for the run")
    ap.add_argument("--out", help="folder for results.json, meta.json, table.txt, log.txt")
    ap.add_argument("--list", action="store_true", help="print the selected tests (from the file's syntax tree)")
    ap.add_argument("-k", help="passed to pytest")
    ap.add_argument("--jobs", type=int, default=1, help="pytest processes at once, each a shard of the tests")
    ap.add_argument("--test-timeout", type=float, default=300, help="seconds before a test's process is killed")
    ap.add_argument("--route", choices=("auto", "extension", "pluggable"), help="STREAMPOOL_TORCH_ROUTE")
    ap.add_argument("--python", default=sys.executable, help="interpreter for pytest (default: this one)")
    ap.add_argument("--compare", nargs=2, metavar=("STOCK_JSON", "STREAMPOOL_JSON"))
    args = ap.parse_args(argv)
    if args.compare:
        print("\n".join(compare_report(*(json.loads(Path(p).read_text()) for p in args.compare))))
        return 0
    if not args.test_file:
        ap.error("the path of PyTorch's test_cuda.py is needed")
    if args.list:
        ids = ast_test_ids(Path(args.test_file).read_text(), Path(args.test_file).name)
        print("\n".join(ids + [f"{c:5} {cls}" for cls, c in sorted(Counter(split_id(i)[0] for i in ids).items())]))
        print(f"{len(ids)} tests selected ('*': pytest sees the name with suffixes; a run selects from its collection)")
        return 0
    if not args.out:
        ap.error("--out DIR is needed for a run")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
