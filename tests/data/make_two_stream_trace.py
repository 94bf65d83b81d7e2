#!/usr/bin/env python3
"""Writes two_stream.trace.csv: a synthetic allocation trace in the shape of a PyTorch training
loop with a side stream (docs/trace-format.md). Each step a side stream allocates the step's
inputs; the main stream (the default stream, value 0) allocates activations and frees them; the
program frees the inputs after the main stream used them (record_stream), so each input's
free_completed comes several events after its free_requested. Deterministic (fixed seed):
`python3 make_two_stream_trace.py > two_stream.trace.csv` reproduces the committed file."""
import random

SIDE = 94_000_000_001  # the side stream's recorded handle value
MIB = 1 << 20


def main() -> None:
    rng = random.Random(15)
    lines = ["action,addr,size,stream,time_us"]
    next_addr = 0x7F00_0000_0000
    time_us = 1_000_000

    def emit(action: str, addr: int, size: int, stream: int) -> None:
        nonlocal time_us
        time_us += rng.randint(1, 40)
        lines.append(f"{action},{addr},{size},{stream},{time_us}")

    def new_addr(size: int) -> int:
        nonlocal next_addr
        addr = next_addr
        next_addr += (size + 511) // 512 * 512
        return addr

    pending = []  # (events left before free_completed, addr, size) for record_stream'ed inputs
    for _step in range(40):
        batch = rng.choice([4, 8, 16])
        inputs = []
        for _ in range(3):  # side stream: the inputs of this step (large and small blocks)
            size = batch * rng.choice([256 * 1024, 1 * MIB, 3 * MIB + 4096, 7 * MIB])
            addr = new_addr(size)
            emit("alloc", addr, size, SIDE)
            inputs.append((addr, size))
        small = new_addr(4096 * batch)
        emit("alloc", small, 4096 * batch, SIDE)
        inputs.append((small, 4096 * batch))
        acts = []
        for _ in range(rng.randint(4, 8)):  # main stream: activations, some freed at once
            size = rng.choice([512, 96 * 1024, 2 * MIB, batch * 5 * MIB + 512, 24 * MIB])
            addr = new_addr(size)
            emit("alloc", addr, size, 0)
            acts.append((addr, size))
            if rng.random() < 0.4:
                addr, size = acts.pop()
                emit("free_requested", addr, size, 0)
                emit("free_completed", addr, size, 0)
            for item in list(pending):  # delayed frees complete while the main stream works
                item[0] -= 1
                if item[0] <= 0:
                    emit("free_completed", item[1], item[2], SIDE)
                    pending.remove(item)
        for addr, size in inputs:  # program frees the inputs; main stream still uses them
            emit("free_requested", addr, size, SIDE)
            pending.append([rng.randint(1, 6), addr, size])
        for addr, size in acts:
            emit("free_requested", addr, size, 0)
            emit("free_completed", addr, size, 0)
    for _, addr, size in pending:
        emit("free_completed", addr, size, SIDE)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
