#!/usr/bin/env python3
"""scripts/traces/record_training.py — runs one small real PyTorch training on the GPU and records
what its caching allocator did: the allocation history as a snapshot pickle (`--snapshot`) and the
peak figures PyTorch reports (`--stats`, JSON). The allocator config comes from
PYTORCH_CUDA_ALLOC_CONF as in any PyTorch program, so the same command rerun under another config
measures what stock PyTorch reserves with it (the figures `streampool-bench tune` predicts).

    python3 scripts/traces/record_training.py --model resnet50_varres --snapshot r.pickle --stats r.json

Models (seeded: the same command allocates the same sizes in the same order):
  resnet50_varres   torchvision ResNet-50, SGD with momentum, batch 16-64, resolution 160-224
  gpt2_varlen       GPT-2 (6 layers, d=768) built from its transformers config, AdamW, seq 128-1024
  twostream_cnn     ResNet-18; a side stream makes and augments each batch, the main stream trains
                    on it after record_stream (an input pipeline on two streams)
  threestream_enc   Transformer encoder, variable length; inputs made on a side stream, an EMA copy of
                    the weights updated on a third stream; record_stream on both
Recording starts before the model is built, so the trace holds the whole run.
"""
import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def resnet50_varres(steps, rng):
    import torchvision
    model = torchvision.models.resnet50(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(steps):
        b = rng.choice([16, 32, 48, 64])
        r = rng.choice([160, 192, 224])
        x = torch.randn(b, 3, r, r, device="cuda")
        y = torch.randint(0, 1000, (b,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        yield loss


def gpt2_varlen(steps, rng):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        b = rng.choice([4, 8])
        s = rng.randint(128, 1024)
        ids = torch.randint(0, cfg.vocab_size, (b, s), device="cuda")
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        yield loss


def twostream_cnn(steps, rng):
    import torchvision
    model = torchvision.models.resnet18(num_classes=100).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    for _ in range(steps):
        b = rng.choice([32, 64, 96])
        r = rng.choice([128, 160, 192])
        with torch.cuda.stream(side):
            raw = torch.rand(b, 3, r + 32, r + 32, device="cuda")
            crop = raw[:, :, 16:16 + r, 16:16 + r].contiguous()
            x = (crop - 0.5) / 0.25
            x = torch.flip(x, dims=[3]) if rng.random() < 0.5 else x
            y = torch.randint(0, 100, (b,), device="cuda")
            del raw, crop
        main.wait_stream(side)
        x.record_stream(main)
        y.record_stream(main)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, y
        yield loss


def threestream_enc(steps, rng):
    d = 512
    layer = nn.TransformerEncoderLayer(d, 8, 2048, batch_first=True)
    model = nn.TransformerEncoder(layer, 6).cuda()
    head = nn.Linear(d, 1000).cuda()
    params = list(model.parameters()) + list(head.parameters())
    ema = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=1e-4)
    data = torch.cuda.Stream()
    ema_stream = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    for _ in range(steps):
        b = rng.choice([8, 16, 32])
        s = rng.randint(64, 512)
        with torch.cuda.stream(data):
            x = torch.randn(b, s, d, device="cuda")
            y = torch.randint(0, 1000, (b, s), device="cuda")
        main.wait_stream(data)
        x.record_stream(main)
        y.record_stream(main)
        loss = F.cross_entropy(head(model(x)).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, y
        ema_stream.wait_stream(main)
        with torch.cuda.stream(ema_stream):
            snap = [p.detach().clone() for p in params]  # made on the EMA stream
            for e, s_ in zip(ema, snap):
                e.mul_(0.99).add_(s_, alpha=0.01)
            del snap
        for e in ema:
            e.record_stream(ema_stream)
        main.wait_stream(ema_stream)
        yield loss


MODELS = {f.__name__: f for f in (resnet50_varres, gpt2_varlen, twostream_cnn, threestream_enc)}


def timed(steps, seconds):
    """The losses of `steps` (float() waits for each step), with each step's wall time in `seconds`."""
    losses = []
    t = time.perf_counter()
    for loss in steps:
        losses.append(float(loss))
        now = time.perf_counter()
        seconds.append(round(now - t, 5))
        t = now
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--snapshot", help="write the allocation history here (a _dump_snapshot pickle)")
    ap.add_argument("--stats", help="write PyTorch's peak figures here (JSON)")
    ap.add_argument("--max-entries", type=int, default=2_000_000)
    ap.add_argument("--allocator", choices=["torch", "streampool"], default="torch",
                    help="train with PyTorch's own allocator, or with streampool installed "
                         "(streampool.install(); its config from STREAMPOOL_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF)")
    ap.add_argument("--record-with", choices=["torch", "streampool"], default="torch",
                    help="write --snapshot with torch.cuda.memory directly, or with streampool.record() "
                         "(the Python package; same file)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("record_training.py: no CUDA device")
    if args.allocator == "streampool":
        import streampool
        streampool.install()
    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    rng = random.Random(args.seed)
    start = time.time()
    step_seconds = []
    if args.snapshot and args.record_with == "streampool":
        import streampool
        with streampool.record(args.snapshot):
            losses = timed(MODELS[args.model](args.steps, rng), step_seconds)
            torch.cuda.synchronize()
    else:
        if args.snapshot:
            torch.cuda.memory._record_memory_history(max_entries=args.max_entries, context=None, stacks="python")
        losses = timed(MODELS[args.model](args.steps, rng), step_seconds)
        torch.cuda.synchronize()
        if args.snapshot:
            torch.cuda.memory._dump_snapshot(args.snapshot)
            torch.cuda.memory._record_memory_history(enabled=None)
    if args.allocator == "streampool":
        import streampool
        s = streampool.stats()
    else:
        s = torch.cuda.memory_stats()
    out = {
        "model": args.model, "steps": args.steps, "seed": args.seed,
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "peak_reserved_bytes": s.get("reserved_bytes.all.peak", 0),
        "peak_allocated_bytes": s.get("allocated_bytes.all.peak", 0),
        "peak_requested_bytes": s.get("requested_bytes.all.peak", 0),
        "segments_allocated": s.get("segment.all.allocated", 0),
        "num_alloc_retries": s.get("num_alloc_retries", 0),
        "allocator": args.allocator,
        "STREAMPOOL_ALLOC_CONF": os.environ.get("STREAMPOOL_ALLOC_CONF", ""),
        "num_cross_stream_reuses": s.get("num_cross_stream_reuses", 0),
        "num_cross_stream_waits": s.get("num_cross_stream_waits", 0),
        "num_moved_pages": s.get("num_moved_pages", 0),
        "num_fence_host_waits": s.get("num_fence_host_waits", 0),
        "num_allocations": s.get("allocation.all.allocated", 0),
        "losses": losses, "seconds": round(time.time() - start, 2), "step_seconds": step_seconds,
    }
    text = json.dumps(out)
    print(text)
    if args.stats:
        with open(args.stats, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
