#!/usr/bin/env python3
"""torch_gpu_bench.py — PyTorch's side of scripts/gpu_bench.sh, on one GPU.

  python3 tools/torch_gpu_bench.py ops                 # SDPA (bf16) fwd+bwd and torch.matmul (= cuBLAS) at
                                                       # the shapes bench_ops times ours at
  python3 tools/torch_gpu_bench.py train --hidden 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
      --vocab 128256 --tied --batch 4 --seq 1024 --steps 8 [--compile] [--tf32] [--peak-tflops 495]

train builds a Llama with the architecture of pentatron's (RMSNorm, RoPE, GQA attention through
scaled_dot_product_attention, SwiGLU, optionally tied embeddings), random weights, float32 (TF32 matmuls
with --tf32, as pentatron's --tf32), AdamW; times the steps after two warm-ups with CUDA events and prints
tokens/s, MFU with pentatron's FLOP count (6 N_matmul + 12 L h T per token), peak memory, and the top
kernels of one profiled step. Figures only: it asserts nothing.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def cuda_ms(fn, reps=10, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


# the shapes of bench_ops' GEMM and tensor-core attention tables (bench/ops.cpp)
GEMMS = [(4096, 4096, 4096), (8192, 2048, 2048), (4096, 8192, 2048), (4096, 128256, 2048)]
ATTN = [(4, 1024, 32, 8, 64), (2, 2048, 32, 8, 128), (1, 4096, 32, 8, 64)]


def ops():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("\ntorch.matmul (cuBLAS), C = A @ B^T, median of 10, TFLOP/s")
    print(f"{'M x N x K':>24} {'fp32':>8} {'tf32':>8} {'bf16':>8}")
    for M, N, K in GEMMS:
        row = []
        for dt, tf32 in ((torch.float32, False), (torch.float32, True), (torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(M, K, device="cuda", dtype=dt)
            b = torch.randn(N, K, device="cuda", dtype=dt)
            ms = cuda_ms(lambda: a @ b.t())
            row.append(2 * M * N * K / ms / 1e9)
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"{f'{M} x {N} x {K}':>24} {row[0]:8.1f} {row[1]:8.1f} {row[2]:8.1f}")
    print("\nscaled_dot_product_attention, bf16, causal, GQA, median of 10")
    print(f"{'B x T, nh/nkv, hd':>24} {'fwd ms':>8} {'bwd ms':>8} {'fwd TF/s':>9} {'bwd TF/s':>9}")
    for B, T, nh, nkv, hd in ATTN:
        q = torch.randn(B, nh, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, nkv, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, nkv, T, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(B, nh, T, hd, device="cuda", dtype=torch.bfloat16)
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        fwd_ms = cuda_ms(fwd)
        o = fwd()
        bwd_ms = cuda_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
        flops = 4 * B * nh * T * T * hd / 2  # causal: half the score matrix
        print(f"{f'{B} x {T}, {nh}/{nkv}, {hd}':>24} {fwd_ms:8.3f} {bwd_ms:8.3f} {flops / fwd_ms / 1e9:9.1f} "
              f"{2.5 * flops / bwd_ms / 1e9:9.1f}")


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        hd = a.hidden // a.heads
        self.emb = torch.nn.Embedding(a.vocab, a.hidden)
        self.layers = torch.nn.ModuleList()
        for _ in range(a.layers):
            layer = torch.nn.Module()
            layer.n1 = torch.nn.Parameter(torch.ones(a.hidden))
            layer.qkv = torch.nn.Linear(a.hidden, (a.heads + 2 * a.kv_heads) * hd, bias=False)
            layer.o = torch.nn.Linear(a.heads * hd, a.hidden, bias=False)
            layer.n2 = torch.nn.Parameter(torch.ones(a.hidden))
            layer.gate_up = torch.nn.Linear(a.hidden, 2 * a.ffn, bias=False)
            layer.down = torch.nn.Linear(a.ffn, a.hidden, bias=False)
            self.layers.append(layer)
        self.norm = torch.nn.Parameter(torch.ones(a.hidden))
        self.head = None if a.tied else torch.nn.Linear(a.hidden, a.vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)
        inv = 1.0 / (a.theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        f = torch.arange(a.seq, dtype=torch.float32)[:, None] * inv[None, :]
        e = torch.cat([f, f], dim=-1)
        self.register_buffer("cos", e.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin", e.sin()[None, :, None, :], persistent=False)

    def rope(self, x):
        h = x.shape[-1] // 2
        return x * self.cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * self.sin

    def forward(self, tokens):
        a = self.a
        B, T = tokens.shape
        hd = a.hidden // a.heads
        x = self.emb(tokens)
        for l in self.layers:
            h = F.rms_norm(x, (a.hidden,), l.n1, 1e-5)
            q, k, v = l.qkv(h).split([a.heads * hd, a.kv_heads * hd, a.kv_heads * hd], dim=-1)
            q = self.rope(q.view(B, T, a.heads, hd)).transpose(1, 2)
            k = self.rope(k.view(B, T, a.kv_heads, hd)).transpose(1, 2)
            v = v.view(B, T, a.kv_heads, hd).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + l.o(y.transpose(1, 2).reshape(B, T, a.heads * hd))
            g, u = l.gate_up(F.rms_norm(x, (a.hidden,), l.n2, 1e-5)).chunk(2, dim=-1)
            x = x + l.down(F.silu(g) * u)
        x = F.rms_norm(x, (a.hidden,), self.norm, 1e-5)
        w = self.emb.weight if self.head is None else self.head.weight
        return x @ w.t()


def top_kernels(step, n=12):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0)) > 0]
    key = lambda e: getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0))
    rows.sort(key=key, reverse=True)
    total = sum(key(e) for e in rows if not e.key.startswith("ProfilerStep"))
    print(f"top kernels of one step (torch.profiler), {total / 1e3:.1f} ms of kernel time:")
    for e in rows[:n]:
        print(f"  {key(e) / 1e3:9.2f} ms {e.count:6d} calls  {e.key[:110]}")


def train(a):
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(0)
    model = Llama(a).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    n_matmul = n_params - (0 if a.tied else a.vocab * a.hidden)  # the embedding lookup is no matmul; lm_head is
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    fwd = torch.compile(model) if a.compile else model
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    targets = torch.randint(0, a.vocab, (a.batch * a.seq,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(tokens).view(-1, a.vocab), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    t_compile = time.perf_counter()
    for _ in range(2):  # warm-up (and compilation)
        step()
    torch.cuda.synchronize()
    t_compile = time.perf_counter() - t_compile
    torch.cuda.reset_peak_memory_stats()
    ms = []
    for _ in range(a.steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        loss = step()
        e1.record()
        e1.synchronize()
        ms.append(e0.elapsed_time(e1))
    med = statistics.median(ms)
    tok_s = a.batch * a.seq / (med / 1e3)
    flops_tok = 6 * n_matmul + 12 * a.layers * a.hidden * a.seq
    mfu = tok_s * flops_tok / (a.peak_tflops * 1e12) if a.peak_tflops > 0 else float("nan")
    mode = ("torch.compile" if a.compile else "eager") + (", tf32" if a.tf32 else ", fp32")
    print(f"pytorch {torch.__version__} {mode}: {n_params / 1e9:.2f}B parameters, batch {a.batch} x {a.seq}: "
          f"step median {med:.1f} ms = {tok_s:.0f} tok/s, MFU {100 * mfu:.1f}% (of {a.peak_tflops:g} TFLOP/s), "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated / "
          f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB reserved, loss {float(loss):.3f}, warm-up "
          f"{t_compile:.1f} s")
    if a.profile:
        top_kernels(step)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["ops", "train"])
    for name, default in (("hidden", 2048), ("layers", 16), ("heads", 32), ("kv-heads", 8), ("ffn", 8192),
                          ("vocab", 128256), ("batch", 4), ("seq", 1024), ("steps", 8)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--theta", type=float, default=500000.0)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_gpu_bench: torch sees no GPU")
    ops() if a.what == "ops" else train(a)


if __name__ == "__main__":
    main()
