"""tools/figures/ch03_zero.py — chapter 03's picture: what each ZeRO stage leaves on one rank.

  ch03_zero_llama3     per-GPU model state (weights, gradients, optimizer) for ZeRO 0/1/2/3 against dp: Llama 3 8B
                       in the playbook's bf16 mixed precision (its closed form 2Ψ+2Ψ+12Ψ, the sharded terms over N)
  ch03_zero_measured   the same for the `small` model in fp32 as this code shards it (uneven units, formulas.hpp's
                       zero_model_state_bytes_fp32), with the allocator's count on rank 0 in short runs of 03_zero
                       (its "model state per rank" table)

Playbook: "Data parallelism" — "ZeRO (Zero Redundancy Optimizer)", the memory of ZeRO-1/2/3.
Run: make figures CH=03
"""
import re

from figlib import Figure, GiB, MiB, new_figure

STAGES = [0, 1, 2, 3]
COLORS = {0: "#8c8c8c", 1: "#4c72b0", 2: "#dd8452", 3: "#55a868"}
BIG_DPS = [1, 2, 4, 8, 16, 32, 64]
SMALL_DPS = list(range(1, 9))
MEASURED_DPS = [2, 4]


def rank0_state(stdout):
    """rank 0's row of 03_zero's table: params, grads, master, optim (the allocator's bytes)"""
    for line in stdout.splitlines():
        m = re.match(r"\s+0\s+(\d+) \(\s*\d+\)\s+(\d+) \(\s*\d+\)\s+(\d+)\s+(\d+) \(", line)
        if m:
            return [int(x) for x in m.groups()]
    raise ValueError("03_zero printed no 'model state per rank' row for rank 0:\n" + stdout[-1500:])


def zero_llama3(ctx):
    """The playbook's picture: Llama 3 8B in bf16 mixed precision, the closed form 2Ψ + 2Ψ + 12Ψ"""
    psi = ctx.formulas({"fn": "model", "model": "llama3-8b"})["params"]
    data = {"model": "llama3-8b", "psi": psi, "dp": BIG_DPS, "state": {},
            "command": "build/bin/formula_dump (zero_model_state_bf16_mixed)"}
    fig, axes = new_figure("Model state per GPU under ZeRO against dp: Llama 3 8B, bf16 mixed precision",
                           "Data parallelism — ZeRO (Zero Redundancy Optimizer)")
    ax = axes[0][0]
    for st in STAGES:
        series = ctx.series([{"fn": "zero_model_state_bf16_mixed", "stage": st, "psi": psi, "dp": n} for n in BIG_DPS])
        data["state"][str(st)] = series
        ax.plot(BIG_DPS, [GiB(r["total"]) for r in series["values"]], "o-", color=COLORS[st],
                label=("plain DP" if st == 0 else f"ZeRO-{st}") + ": " + SHARDS[st])
    ax.axhline(GiB(80e9), color="black", lw=0.8, ls="--")
    ax.text(1, GiB(80e9), " 80 GB (H100)", va="bottom", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(BIG_DPS, [str(n) for n in BIG_DPS])
    ax.set_xlabel("dp (GPUs)")
    ax.set_ylabel("GiB per GPU (weights + gradients + fp32 master + Adam)")
    ax.set_title(f"Ψ = {psi / 1e9:.2f}B parameters; activations not included")
    ax.legend()
    return fig, data


SHARDS = {0: "2Ψ + 2Ψ + 12Ψ", 1: "2Ψ + 2Ψ + 12Ψ/N", 2: "2Ψ + (2 + 12)Ψ/N", 3: "(2 + 2 + 12)Ψ/N"}


def zero_measured(ctx):
    """Our `small` model in fp32 as this code shards it, with the allocator's count of rank 0"""
    data = {"model": "small", "dp": SMALL_DPS, "formula": {}, "measured": {}, "machine": ctx.machine(), "commands": []}
    fig, axes = new_figure("Model state on rank 0 under ZeRO against dp: model small, fp32 (4Ψ + 4Ψ + 8Ψ)",
                           "Data parallelism — ZeRO (Zero Redundancy Optimizer)")
    ax = axes[0][0]
    for st in STAGES:
        series = ctx.series([{"fn": "zero_model_state", "model": "small", "stage": st, "dp": n, "rank": 0,
                              "precision": "fp32"} for n in SMALL_DPS])
        data["formula"][str(st)] = series
        ax.plot(SMALL_DPS, [MiB(r["total"]) for r in series["values"]], "-", color=COLORS[st],
                label="plain DP (formula)" if st == 0 else f"ZeRO-{st} (formula)")
        measured = []
        for n in MEASURED_DPS:
            _, out, cmd = ctx.run(n, "03_zero", ["--dp", n, "--zero", st, "--steps", 1, "--warmup", 0,
                                                 "--eval-every", 0, "--log-every", 1], jsonl=False)
            measured.append(rank0_state(out))
            data["commands"].append(cmd)
        data["measured"][str(st)] = {"dp": MEASURED_DPS, "params_grads_master_optim": measured}
        ax.plot(MEASURED_DPS, [MiB(sum(m)) for m in measured], "o", color=COLORS[st], ms=9, mfc="none", mew=2)
    ax.plot([], [], "o", color="black", mfc="none", mew=2, label="measured: allocator's count on rank 0 (03_zero, 1 step)")
    ax.set_xlabel("dp (ranks)")
    ax.set_ylabel("MiB on rank 0")
    ax.set_title("formula: formulas.hpp's zero_model_state_bytes_fp32 with this code's uneven shards")
    ax.legend(loc="upper right")
    return fig, data


FIGURES = [Figure("ch03_zero_llama3", "03", zero_llama3, "formula"),
           Figure("ch03_zero_measured", "03", zero_measured, "run")]
