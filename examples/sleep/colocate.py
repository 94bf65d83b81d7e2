"""examples/sleep/colocate.py — an RL-style colocation loop on one GPU (docs/sleep-wake.md): a
trainer (GPT-2 small, AdamW) and a generator (a Llama-style model built from a transformers
config, greedy decoding with its decode step in a CUDA graph) take turns for --cycles cycles.

  --mode sleep    each phase puts the other to sleep with streampool: while generating, the
                  trainer's parameters, gradients and optimizer state are offloaded; while
                  training, the generator's weights are offloaded and its KV cache (and its
                  graph's pool) discarded. Woken before use, at the same addresses. The pinned
                  backups are kept between cycles (keep_backup=True).
  --mode nosleep  the same loop with everything resident (the reference).

Writes OUT/result.json: the trainer's losses and the generated tokens per cycle (compared bitwise
by compare.py against the other mode), the peak device memory in use (total - free, sampled at
every phase boundary), the peak of each phase, and the time spent in sleep and wake per cycle.
Needs torch, transformers and a GPU; installs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("sleep", "nosleep"), required=True)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--train-steps", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import streampool
    streampool.install()
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    # Bitwise comparison across runs needs deterministic kernels (the embedding backward's
    # atomics otherwise differ from run to run, sleeping or not).
    torch.use_deterministic_algorithms(True)
    dev = torch.device("cuda")
    sleeping = args.mode == "sleep"
    in_use = []  # (label, bytes in use on the device)

    def sample(label: str) -> None:
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        in_use.append((label, total - free))

    def region(tag):
        return streampool.region(tag) if sleeping else _nothing()

    # --- trainer ----------------------------------------------------------------------------------
    with region("trainer"):
        trainer = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=512)).to(dev)
        opt = torch.optim.AdamW(trainer.parameters(), lr=1e-4)
    gen_batch = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 50257, (8, 256), generator=gen_batch) for _ in range(args.train_steps)]

    def train_phase() -> list:
        losses = []
        with region("trainer"):
            for tokens in batches:
                tokens = tokens.to(dev)
                loss = trainer(input_ids=tokens, labels=tokens).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=False)  # gradients stay allocated: they sleep with the trainer
                losses.append(loss.item())
        return losses

    # --- generator ----------------------------------------------------------------------------------
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=1024)
    with region("gen_weights"):
        generator = LlamaForCausalLM(cfg).to(dev, dtype=torch.bfloat16).eval()
    prompt = torch.randint(0, 32000, (4, 64), generator=torch.Generator().manual_seed(2)).to(dev)
    max_len = prompt.shape[1] + args.new_tokens
    graph_note = "decode step in a CUDA graph"
    with region("gen_kv"):
        cache = _static_cache(generator, cfg, prompt.shape[0], max_len, dev)
        static_tok = torch.zeros((prompt.shape[0], 1), dtype=torch.long, device=dev)
        static_pos = torch.zeros((1,), dtype=torch.long, device=dev)

    def decode_step():
        out = generator(input_ids=static_tok, past_key_values=cache, cache_position=static_pos, use_cache=True)
        return out.logits[:, -1, :].argmax(-1, keepdim=True)

    graph = None
    static_next = None
    with torch.no_grad():
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), region("gen_kv"):
                for _ in range(2):
                    decode_step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            pool = streampool.region_pool("gen_kv").id if sleeping else None
            with torch.cuda.graph(graph, pool=pool):
                static_next = decode_step()
        except Exception as e:  # noqa: BLE001 - reported, the loop runs eagerly then
            graph = None
            graph_note = f"eager decode (graph capture failed: {type(e).__name__}: {e})"[:300]
            torch.cuda.synchronize()

    def generate_phase() -> list:
        with torch.no_grad(), region("gen_kv"):
            cache.reset()
            logits = generator(input_ids=prompt, past_key_values=cache,
                               cache_position=torch.arange(prompt.shape[1], device=dev), use_cache=True).logits
            tok = logits[:, -1, :].argmax(-1, keepdim=True)
            tokens = [tok]
            for i in range(args.new_tokens - 1):
                static_tok.copy_(tok)
                static_pos.fill_(prompt.shape[1] + i)
                if graph is not None:
                    graph.replay()
                    tok = static_next.clone()
                else:
                    tok = decode_step()
                tokens.append(tok)
        return torch.cat(tokens, dim=1).cpu().tolist()

    # --- the loop -----------------------------------------------------------------------------------
    cycles = []
    sample("start")
    for c in range(args.cycles):
        t_sleep = t_wake = 0.0
        if sleeping:  # the generator's turn: the trainer sleeps
            t0 = time.perf_counter()
            streampool.sleep("trainer", keep_backup=True)
            t_sleep += time.perf_counter() - t0
        sample(f"cycle {c}: generator phase starts")
        tokens = generate_phase()
        sample(f"cycle {c}: generator phase ends")
        if sleeping:  # the trainer's turn: the generator sleeps
            t0 = time.perf_counter()
            streampool.sleep("gen_weights", keep_backup=True)
            streampool.sleep("gen_kv", mode="discard")
            t_sleep += time.perf_counter() - t0
            t0 = time.perf_counter()
            streampool.wake("trainer")
            t_wake += time.perf_counter() - t0
        sample(f"cycle {c}: trainer phase starts")
        losses = train_phase()
        sample(f"cycle {c}: trainer phase ends")
        if sleeping:
            t0 = time.perf_counter()
            streampool.wake(["gen_weights", "gen_kv"])
            t_wake += time.perf_counter() - t0
        cycles.append({"losses": losses, "tokens": tokens, "sleep_seconds": t_sleep, "wake_seconds": t_wake})
        print(f"cycle {c}: losses {['%.6f' % x for x in losses]} first tokens {tokens[0][:6]} "
              f"sleep {t_sleep:.3f}s wake {t_wake:.3f}s", flush=True)

    gen_peak = max(b for label, b in in_use if "generator" in label)
    train_peak = max(b for label, b in in_use if "trainer" in label)
    result = {
        "mode": args.mode,
        "config": os.environ.get("STREAMPOOL_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or "",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "graph": graph_note,
        "cycles": cycles,
        "peak_in_use_bytes": max(b for _, b in in_use),
        "generator_phase_peak_bytes": gen_peak,
        "trainer_phase_peak_bytes": train_peak,
        "max_memory_reserved_bytes": torch.cuda.max_memory_reserved(),
        "samples": in_use,
        "sleep_state": {tag: streampool.sleep_state(tag) for tag in ("trainer", "gen_weights", "gen_kv")}
        if sleeping else {},
    }
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"peak in use {result['peak_in_use_bytes'] / 2**30:.2f} GiB (generator phase "
          f"{gen_peak / 2**30:.2f}, trainer phase {train_peak / 2**30:.2f}); {graph_note}")
    return 0


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _static_cache(model, cfg, batch, max_len, dev):
    """transformers' StaticCache, across the constructor signatures of 4.4x and 5.x."""
    import torch
    from transformers import StaticCache
    attempts = (
        dict(config=cfg, max_cache_len=max_len),
        dict(config=cfg, max_batch_size=batch, max_cache_len=max_len, device=dev, dtype=torch.bfloat16),
        dict(config=cfg, batch_size=batch, max_cache_len=max_len, device=dev, dtype=torch.bfloat16),
    )
    errors = []
    for kwargs in attempts:
        try:
            return StaticCache(**kwargs)
        except TypeError as e:
            errors.append(str(e))
    raise RuntimeError("cannot build a StaticCache: " + " | ".join(errors))


if __name__ == "__main__":
    sys.exit(main())
