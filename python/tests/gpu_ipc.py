#!/usr/bin/env python3
"""CUDA IPC between two processes on one GPU (issue 28, docs/ipc-and-nccl.md): a CUDA tensor sent
through a torch.multiprocessing queue from a producer to a consumer, each a spawned process that
runs either stock PyTorch or streampool's extension allocator, with normal or expandable segments.
The consumer checks the producer's data, writes into the shared memory, and the producer sees the
write. Needs torch 2.11 with CUDA and streampool installed with its extension.

  pairs     sp->sp, sp->stock, stock->sp (normal segments, the 'c' handle); stock(expandable)->sp,
            ->stock(expandable), ->stock, and sp(expandable)->sp, ->stock, ->stock(expandable) (the
            'e' handle: PyTorch's expandable-segment IPC)
  kills     the producer killed after the consumer opened (expandable senders: the consumer still
            reads the data);
            the consumer killed after it opened (the producer frees, empties its cache, allocates
            again); the producer killed before the consumer opened (the consumer gets an error,
            not a crash); device free memory back to where it started
  imports   100 tensors of 24 MiB each from a stock expandable producer, opened by a streampool
            consumer and by a stock one: the open latency per tensor (queue get included) and the
            address space reserved per import (growth of the consumer's VmSize), printed and
            written to imports.json

  python3 python/tests/gpu_ipc.py [--out DIR] [--only pairs,kills,imports]

Prints one PASS/FAIL line per case and a summary; exits 1 if any failed, 3 without torch or a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

MIB = 1 << 20
TIMEOUT = 120

# A role is (allocator, expandable): "sp" is streampool's extension, "stock" PyTorch's own.
ROLES = {
    "sp": ("sp", False), "sp_exp": ("sp", True),
    "stock": ("stock", False), "stock_exp": ("stock", True),
}


def _setup(role: str) -> None:
    allocator, expandable = ROLES[role]
    for name in ("STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        os.environ.pop(name, None)
    if allocator == "sp":
        os.environ["STREAMPOOL_ALLOC_CONF"] = "expandable_segments:True" if expandable else "expandable_segments:False"
        import streampool

        streampool.install(route="extension")
    elif expandable:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        os.environ.setdefault("TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC", "1")


def producer(role: str, elements: int, count: int, to_consumer, from_consumer, result, hold: str) -> None:
    try:
        _setup(role)
        import torch

        tensors = [torch.arange(elements, device="cuda", dtype=torch.float32) + i for i in range(count)]
        torch.cuda.synchronize()
        try:
            for t in tensors:
                to_consumer.put(t)
        except Exception as e:  # noqa: BLE001 - the refusal of an unsupported export is a result
            result.put(("producer", "refused", f"{type(e).__name__}: {e}"))
            return
        if hold == "die_after_send":
            result.put(("producer", "sent", ""))
            time.sleep(0.5)  # let the queue's feeder thread hand the handle over
            os._exit(0)  # killed before the consumer opened (it may not have yet)
        opened = from_consumer.get(timeout=TIMEOUT)  # "opened", or "dying": the consumer is killed now
        if hold == "die_after_open":
            os._exit(0)
        if opened == "opened":
            expect(from_consumer.get(timeout=TIMEOUT) == "wrote", "the consumer did not write")
            torch.cuda.synchronize()
            result.put(("producer", "saw", float(tensors[0][0])))
        # The consumer may have died holding the memory: free, empty the cache, allocate again.
        del tensors
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        again = torch.ones(elements, device="cuda")
        result.put(("producer", "done", float(again.sum())))
    except Exception:  # noqa: BLE001
        result.put(("producer", "error", traceback.format_exc()))


def vm_size_bytes() -> int:
    """This process's virtual address space (VmSize): CUDA reserves device address space in it too."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def consumer(role: str, elements: int, count: int, to_consumer, from_consumer, result, hold: str) -> None:
    try:
        _setup(role)
        import torch

        torch.cuda.init()
        torch.empty(1, device="cuda")  # the context and the allocator exist before the imports are measured
        opened = []
        vm_before = vm_size_bytes()
        start = time.perf_counter()
        for _ in range(count):
            opened.append(to_consumer.get(timeout=TIMEOUT))
        torch.cuda.synchronize()
        open_s = time.perf_counter() - start
        vm_grown = vm_size_bytes() - vm_before
        first = opened[0]
        expected = float(elements) * (elements - 1) / 2
        total = float(first.double().sum())  # exact: a float32 sum of 6M integers rounds
        if hold == "die_after_open":
            from_consumer.put("dying")
            result.put(("consumer", "opened", total))
            os._exit(0)
        from_consumer.put("opened")
        if hold == "after_producer_died":
            time.sleep(3.0)  # the producer exits now; its memory must stay while we hold it
            total = float(first.double().sum())  # exact: a float32 sum of 6M integers rounds
        first[0] = 12345.0
        torch.cuda.synchronize()
        from_consumer.put("wrote")
        result.put(("consumer", "read", {"sum": total, "expected": expected, "open_s": open_s, "count": count,
                                         "vm_grown": vm_grown}))
        del first, opened
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001
        result.put(("consumer", "error", traceback.format_exc()))


class CheckFailed(Exception):
    pass


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def run_pair(mp, prod: str, cons: str, *, elements: int = 6 * MIB, count: int = 1, prod_hold: str = "",
             cons_hold: str = "") -> dict:
    context = mp.get_context("spawn")
    to_consumer, from_consumer, result = context.Queue(), context.Queue(), context.Queue()
    p = context.Process(target=producer, args=(prod, elements, count, to_consumer, from_consumer, result, prod_hold))
    c = context.Process(target=consumer, args=(cons, elements, count, to_consumer, from_consumer, result, cons_hold))
    p.start()
    c.start()
    messages: dict = {}
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and (p.is_alive() or c.is_alive() or not result.empty()):
        try:
            who, what, value = result.get(timeout=1.0)
        except Exception:  # noqa: BLE001 - queue.Empty
            continue
        messages.setdefault(who, {})[what] = value
        if what in ("refused", "error") and who == "producer":
            c.kill()
    for proc in (p, c):
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    messages["exitcodes"] = (p.exitcode, c.exitcode)
    return messages


def device_free() -> int:
    import torch

    free, _ = torch.cuda.mem_get_info()
    return free


PAIRS = [("sp", "sp"), ("sp", "stock"), ("stock", "sp"), ("stock_exp", "sp"), ("stock_exp", "stock_exp"),
         ("stock_exp", "stock"), ("sp_exp", "sp"), ("sp_exp", "stock"), ("sp_exp", "stock_exp")]
KILL_PAIRS = [("sp", "stock"), ("stock_exp", "sp"), ("sp_exp", "stock"), ("sp_exp", "sp")]


def in_parallel(jobs):
    """Runs (name, function) jobs side by side (each a pair of processes on the GPU); their results in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(f) for _, f in jobs]
        return [(name, future.result()) for (name, _), future in zip(jobs, futures)]


def check_pairs(mp, out: Path) -> list:
    results = []
    jobs = [(f"{prod}->{cons}", lambda prod=prod, cons=cons: run_pair(mp, prod, cons)) for prod, cons in PAIRS]
    for name, m in in_parallel(jobs):
        try:
            expect("refused" not in m.get("producer", {}), f"the producer could not send: {m['producer'].get('refused')}")
            expect("error" not in m.get("producer", {}), f"producer error:\n{m.get('producer', {}).get('error')}")
            expect("error" not in m.get("consumer", {}), f"consumer error:\n{m.get('consumer', {}).get('error')}")
            read = m.get("consumer", {}).get("read")
            expect(read is not None, f"the consumer read nothing: {m}")
            expect(read["sum"] == read["expected"], f"sum {read['sum']} != {read['expected']}")
            expect(m["producer"].get("saw") == 12345.0, f"the producer saw {m['producer'].get('saw')} after the write")
            results.append((name, True, f"read and written through the shared memory (exit codes {m['exitcodes']})"))
        except CheckFailed as e:
            results.append((name, False, str(e)))
    return results


def check_kills(mp, out: Path) -> list:
    import torch

    before = device_free()
    jobs = []
    for prod, cons in KILL_PAIRS:
        # Only cuMem memory (the 'e' handle) is promised to outlive its exporter; legacy cudaIpc
        # memory ('c') goes with the process that allocated it, so that case is not asked of it.
        if prod.endswith("_exp"):
            jobs.append((f"kill producer after open {prod}->{cons}",
                         lambda p=prod, c=cons: run_pair(mp, p, c, prod_hold="die_after_open",
                                                         cons_hold="after_producer_died")))
        jobs.append((f"kill consumer after open {prod}->{cons}",
                     lambda p=prod, c=cons: run_pair(mp, p, c, cons_hold="die_after_open")))
        jobs.append((f"kill producer before open {prod}->{cons}",
                     lambda p=prod, c=cons: run_pair(mp, p, c, prod_hold="die_after_send")))
    results = []
    for name, m in in_parallel(jobs):
        if name.startswith("kill producer after open"):
            read = m.get("consumer", {}).get("read")
            ok = read is not None and read["sum"] == read["expected"]
            results.append((name, ok, f"the consumer read {read['sum']} after the producer died" if ok else str(m)[-600:]))
        elif name.startswith("kill consumer after open"):
            ok = m.get("producer", {}).get("done") == float(6 * MIB)
            results.append((name, ok, "the producer freed, emptied its cache and allocated again" if ok else str(m)[-600:]))
        else:
            consumer_state = m.get("consumer", {})
            ok = m["exitcodes"][1] is not None and m["exitcodes"][1] >= 0
            results.append((name, ok, f"the consumer ended cleanly, exit {m['exitcodes'][1]} "
                                      f"({'error' if 'error' in consumer_state else 'read'}: "
                                      f"{str(consumer_state)[-160:]!r})"))
    torch.cuda.synchronize()
    time.sleep(1.0)
    after = device_free()
    results.append(("no device memory left behind", abs(before - after) <= 64 * MIB,
                    f"device free {before / MIB:.0f} MiB before, {after / MIB:.0f} MiB after"))
    return results


def check_imports(mp, out: Path) -> list:
    figures = {}
    results = []
    for cons in ("sp", "stock_exp"):
        m = run_pair(mp, "stock_exp", cons, elements=6 * MIB, count=100)
        read = m.get("consumer", {}).get("read")
        if read is None:
            results.append((f"100 imports stock_exp->{cons}", False, str(m)[-400:]))
            continue
        figures[cons] = {"open_ms_per_tensor": 1000 * read["open_s"] / read["count"],
                         "address_space_mib_per_import": read["vm_grown"] / read["count"] / MIB}
        results.append((f"100 imports stock_exp->{cons}", True,
                        f"{figures[cons]['open_ms_per_tensor']:.3f} ms per tensor (queue get + open), "
                        f"{figures[cons]['address_space_mib_per_import']:.1f} MiB of address space (VmSize) per "
                        f"import of a 24 MiB tensor"))
    (out / "imports.json").write_text(json.dumps(figures, indent=2))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-ipc-out"))
    parser.add_argument("--only", default="pairs,kills,imports")
    args = parser.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("SKIP: torch is not installed")
        return 3
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checks = {"pairs": check_pairs, "kills": check_kills, "imports": check_imports}
    failed = 0
    passed = 0
    for name in args.only.split(","):
        try:
            for case, ok, detail in checks[name](mp, out):
                print(f"{'PASS' if ok else 'FAIL'} {name}: {case}: {detail}", flush=True)
                passed += ok
                failed += not ok
        except Exception:  # noqa: BLE001
            print(f"FAIL {name}: {traceback.format_exc()}", flush=True)
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
