#!/usr/bin/env python3
"""torch_train_bench.py — PyTorch's training throughput on the same model and cores, for `make bench`.

Trains tools/torch_reference.py's Llama (the same architecture as ours, same weights) in float32 with
AdamW as our run sets it (make_adamw: --lr, betas, eps, weight decay off for norm weights, clipping) on
batches of the dumped shape, and prints tokens/s over the timed steps. Threads: the same number
our run uses (one by default, as one rank per core).

  build/bin/01_single_gpu --model small --dump-reference /tmp/ref
  /usr/bin/python3 tools/torch_train_bench.py /tmp/ref [--steps 30] [--threads 1]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import Llama, load, make_adamw  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OPENBLAS_NUM_THREADS", "1")))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    meta = json.load(open(os.path.join(a.dump, "meta.json")))
    B, T = meta["B"], meta["T"]
    model = Llama(meta["config"], meta["tensors"], load(os.path.join(a.dump, "params0.bin"), "<f4"))
    tokens = load(os.path.join(a.dump, "tokens.bin"), "<i4", (B, T))
    targets = load(os.path.join(a.dump, "targets.bin"), "<i4", (B * T,))
    adamw = meta["adamw"]  # our run's settings, so both train the same way
    opt = make_adamw(model, meta["tensors"], adamw)
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(tokens), targets, ignore_index=-1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), adamw["grad_clip"])
        opt.step()
    dt = time.perf_counter() - t0
    print(f"pytorch {torch.__version__}, {a.threads} thread(s): {a.steps} steps of {B}x{T} tokens in {dt:.2f} s "
          f"= {a.steps * B * T / dt:.0f} tok/s (loss {float(loss):.3f})")


if __name__ == "__main__":
    main()
