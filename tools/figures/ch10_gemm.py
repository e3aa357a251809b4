"""tools/figures/ch10_gemm.py — chapter 10's picture: the CPU GEMM ladder against OpenBLAS.

  ch10_cpu_gemm_ladder   `10_kernels --part cpu-gemm --sizes 512 --reps 3` (one thread; OPENBLAS_CORETYPE=Haswell
                         unless set, the kernel CI uses): GFLOP/s of every rung (naive, blocked, packed, avx2,
                         avx512) and OpenBLAS on 512^3 and model small's GEMM shapes, medians of the interleaved
                         repeats, from the lab's own table

Playbook: "A first look at kernels" (why GEMMs are fast).
Run: make figures CH=10
"""
import os
import re
import subprocess

from figlib import Figure, RunError, new_figure

ARGS = ["--part", "cpu-gemm", "--sizes", "512", "--reps", "3"]


def parse(out):
    """The lab's GFLOP/s table: (columns, [(shape, [GFLOP/s per column])])."""
    head = re.search(r"^shape \(M x N x K\)\s+(.*?)\s+speed / OpenBLAS", out, re.M)
    if not head:
        raise ValueError("10_kernels printed no CPU GEMM table")
    cols = head.group(1).split()
    rows = []
    for line in out[head.end():].splitlines()[1:]:
        m = re.match(r"^(.*?\S)\s+((?:[\d.]+\s+){%d})" % len(cols), line + " ")
        if not m or line.startswith("validation"):
            break
        rows.append([m.group(1), [float(v) for v in m.group(2).split()]])
    return cols, rows


def ladder(ctx):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env.setdefault("OPENBLAS_CORETYPE", "Haswell")
    p = subprocess.run([ctx.program("10_kernels")] + ARGS, capture_output=True, text=True, env=env, timeout=300)
    cmd = f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']} build/bin/10_kernels {' '.join(ARGS)}"
    if p.returncode != 0:
        raise RunError(f"{cmd} exited {p.returncode}: {p.stderr[-2000:]}")
    cols, rows = parse(p.stdout)
    kernel = re.search(r"OpenBLAS kernel: (\S+)", p.stdout)
    data = {"command": cmd, "machine": ctx.machine(), "openblas_kernel": kernel.group(1) if kernel else "unknown",
            "columns": cols, "rows": rows}
    fig, axes = new_figure(f"The CPU GEMM ladder, f32, one thread, against OpenBLAS ({data['openblas_kernel']} "
                           f"kernel; {ctx.machine()['cpu']})", "A first look at kernels — the GEMM ladder")
    ax = axes[0][0]
    width = 0.8 / len(rows)
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3"]
    for i, (shape, vals) in enumerate(rows):
        ax.bar([j + (i - (len(rows) - 1) / 2) * width for j in range(len(cols))], vals, width,
               color=colors[i % len(colors)], label=shape)
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols)
    ax.set_yscale("log")
    ax.set_ylabel("GFLOP/s (median of 3 interleaved repeats)")
    ax.set_xlabel("rung (left to right: one idea each), then OpenBLAS")
    ax.legend(fontsize=8, title="shape (M x N x K)")
    return fig, data


FIGURES = [Figure("ch10_cpu_gemm_ladder", "10", ladder, source="run")]
