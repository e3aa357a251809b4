#!/usr/bin/env python3
"""sdpa_compare.py — chapter 10: PyTorch's scaled_dot_product_attention timed at the shapes of the lab's flash
attention table, and the lab's kernels as a share of it.

Playbook: "Flash attention". Reads the "RESULT attention ..." lines that `10_kernels --part attention` prints
(from a log file), times SDPA on the same shapes (causal, GQA through enable_gqa, bf16, q (B, H, T, D)
contiguous: SDPA's own layout) forward and forward+backward with CUDA events (medians of interleaved
repeats after a warm-up), with each backend PyTorch offers (flash, cuDNN, memory-efficient; the default
choice too), and prints ours / the fastest as a percentage. Prints why and exits 0 when torch or a GPU is
missing (the lab's own tables stand without it).

    python3 10_kernels/sdpa_compare.py LOG [--reps 10]          (scripts/gpu_lab.sh runs it)
"""
import argparse
import re
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", help="output of build/bin/10_kernels --part attention")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    pat = re.compile(r"RESULT attention D=(\d+) B=(\d+) T=(\d+) H=(\d+) Hkv=(\d+) fwd_ms=([\d.]+) fwdbwd_ms=([\d.]+)")
    ours = [m.groups() for m in pat.finditer(open(a.log).read())]
    if not ours:
        print(f"sdpa_compare: no RESULT lines in {a.log}")
        return 1
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("sdpa_compare: skipped: torch is not importable here")
        return 0
    if not torch.cuda.is_available():
        print("sdpa_compare: skipped: torch sees no GPU")
        return 0
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                    "efficient": SDPBackend.EFFICIENT_ATTENTION}
    except ImportError:
        sdpa_kernel, backends = None, {}
    print(f"PyTorch {torch.__version__} SDPA on {torch.cuda.get_device_name()}, bf16, causal, GQA; "
          f"medians of {a.reps} interleaved repeats (CUDA events)")

    def event_ms(fn, inner):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / inner

    for D, B, T, H, Hkv, f_ms, fb_ms in ours:
        D, B, T, H, Hkv, f_ms, fb_ms = int(D), int(B), int(T), int(H), int(Hkv), float(f_ms), float(fb_ms)
        torch.manual_seed(0)
        q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=(H != Hkv))

        def fwdbwd():
            torch.autograd.grad(fwd(), (q, k, v), g)

        variants = {"default": None, **backends}
        times = {}
        for name, be in variants.items():
            ctx = (lambda: sdpa_kernel([be])) if be is not None else None
            def run(fn, ctx=ctx):
                if ctx is None:
                    return fn()
                with ctx():
                    return fn()
            try:
                run(fwdbwd)  # warm-up, and the backend may refuse the shape
                torch.cuda.synchronize()
            except Exception as ex:  # noqa: BLE001 (a backend that cannot run this shape is reported, not fatal)
                print(f"  D={D}: SDPA backend {name}: not available here ({type(ex).__name__})")
                continue
            once = event_ms(lambda: run(fwd), 1)
            times[name] = {"fwd": [], "fwdbwd": [], "inner": max(1, int(20 / max(once, 1e-3))), "run": run}
        for _ in range(a.reps):
            for name, t in times.items():
                t["fwd"].append(event_ms(lambda: t["run"](fwd), t["inner"]))
                t["fwdbwd"].append(event_ms(lambda: t["run"](fwdbwd), t["inner"]))
        flops = 2.0 * B * H * T * T * D
        for name, t in times.items():
            fm, fbm = statistics.median(t["fwd"]), statistics.median(t["fwdbwd"])
            print(f"  D={D} B {B} T {T} H {H} Hkv {Hkv}  SDPA {name:<9} fwd {fm:8.3f} ms {flops / fm * 1e-9:7.1f} TFLOP/s"
                  f" | fwd+bwd {fbm:8.3f} ms {3.5 * flops / fbm * 1e-9:7.1f} TFLOP/s")
        if times:
            best_f = min(statistics.median(t["fwd"]) for t in times.values())
            best_fb = min(statistics.median(t["fwdbwd"]) for t in times.values())
            print(f"  D={D}: ours fwd {f_ms:.3f} ms = {100 * best_f / f_ms:.0f}% of the fastest SDPA's speed; "
                  f"fwd+bwd {fb_ms:.3f} ms = {100 * best_fb / fb_ms:.0f}% (target >= 70%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
