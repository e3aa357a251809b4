"""tools/figures/ch09_planner.py — chapter 09's pictures: the planner's choice among every layout, and its memory
prediction beside a real run.

  ch09_planner_landscape   every legal layout of Llama 3 8B on 64 H100s (seq 4096, global batch 256 sequences):
                           predicted tokens/s against the predicted memory of the fullest GPU, the chosen one
                           marked (plan::enumerate_and_rank, as `09_5d_plan --model llama3-8b --machine h100
                           --gpus 64` ranks them)
  ch09_memory_measured     `make run`'s layout (the Makefile's RUN_5D flags, --steps 2): memory per rank measured
                           after step 1 (09_5d's own table) beside plan::predict_rank for the same rank

Playbook: "Finding the best training configuration", "5D parallelism in a nutshell".
Run: make figures CH=09
"""
import os
import re

from figlib import KIND_COLORS, ROOT, Figure, GiB, MiB, new_figure

JOB = {"model": "llama3-8b", "machine": "h100", "gpus": 64, "seq": 4096, "global_batch": 256, "precision": "bf16"}


def sig(x, digits=9):
    """a planner time rounded to 9 significant digits: the same on every x86 machine (-march=native may fuse a
    multiply-add here and not there, which moves the last bits)"""
    return float(f"{x:.{digits}g}")


def landscape(ctx):
    ans = ctx.formulas(dict(JOB, fn="plan_landscape"))
    ranked = ans["ranked"]
    rows = [[c["layout"]["str"], sig(c["tokens_per_s"]), c["memory"], c["fits"], c["reaches_batch"]] for c in ranked]
    columns = ["layout", "tokens_per_s", "memory", "fits", "reaches_batch"]
    data = {"job": JOB, "gpu_memory": ans["gpu_memory"], "chosen": dict(zip(columns, rows[0])),
            "layouts": {c: [r[i] for r in rows] for i, c in enumerate(columns)},
            "command": "build/bin/formula_dump plan_landscape (= build/bin/09_5d_plan --model llama3-8b --machine h100 "
                       "--gpus 64 --seq 4096 --global-batch 256)"}
    fig, axes = new_figure(f"The planner's landscape: {len(rows)} legal layouts of Llama 3 8B on 64 H100s "
                           f"(seq 4096, global batch 256)",
                           "Finding the best training configuration — fit memory, reach the batch, maximise throughput")
    ax = axes[0][0]
    groups = [("fits, reaches the global batch", lambda r: r[3] and r[4], "#4c72b0", 0.5),
              ("fits, misses the global batch", lambda r: r[3] and not r[4], "#dd8452", 0.5),
              ("does not fit in 80 GB", lambda r: not r[3], "#b0b0b0", 0.35)]
    for label, keep, color, alpha in groups:
        pts = [r for r in rows if keep(r)]
        ax.scatter([GiB(r[2]) for r in pts], [r[1] for r in pts], s=10, color=color, alpha=alpha,
                   label=f"{label} ({len(pts)})")
    best = rows[0]
    ax.scatter([GiB(best[2])], [best[1]], marker="*", s=400, color="#c44e52", edgecolor="black", zorder=5,
               label="the planner's choice")
    ax.annotate(best[0], (GiB(best[2]), best[1]), xytext=(15, -25), textcoords="offset points", fontsize=8,
                arrowprops={"arrowstyle": "-", "lw": 0.6})
    ax.axvline(GiB(ans["gpu_memory"]), color="black", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("predicted memory of the fullest GPU (GiB)")
    ax.set_ylabel("predicted tokens/s (whole job)")
    ax.legend(loc="lower left", fontsize=8)
    return fig, data


def run_5d_flags():
    """the Makefile's RUN_5D, the flags of `make run`"""
    text = open(os.path.join(ROOT, "Makefile")).read().replace("\\\n", " ")
    m = re.search(r"^RUN_5D\s*:=\s*(.*)$", text, re.M)
    if not m:
        raise ValueError("Makefile: no RUN_5D := ... line")
    return m.group(1).split()


def replace_flag(flags, name, value):
    out = list(flags)
    if name in out:
        out[out.index(name) + 1] = str(value)
    else:
        out += [name, str(value)]
    return out


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def human(s):
    m = re.fullmatch(r"([\d.]+)(B|KiB|MiB|GiB)", s)
    if not m:
        raise ValueError(f"not a byte count: {s!r}")
    return float(m.group(1)) * UNITS[m.group(2)]


def memory_measured(ctx):
    flags = run_5d_flags()
    np = 1
    for axis in ("--dp", "--tp", "--pp", "--cp"):
        if axis in flags:
            np *= int(flags[flags.index(axis) + 1])
    args = replace_flag(replace_flag(flags, "--steps", 2), "--log-every", 1)
    _, out, cmd = ctx.run(np, "09_5d", args, jsonl=False)
    # the run's model and sequence, as its header prints them
    model = re.search(r"model (\S+) \(", out)
    seq = re.search(r"x (\d+) tokens", out)
    if not model or not seq:
        raise ValueError("09_5d's header names no model or no 'x N tokens':\n" + out[:1500])
    table = out[out.index("memory per rank after step 1, measured"):]
    measured, verdicts = {}, {}
    for line in table.splitlines()[2:]:
        m = re.match(r"\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+\((equal|DIFFERENT)\)\s+(\S+)\s+\(\S+, ([-+.\d]+)%\)", line)
        if not m:
            break
        r = int(m.group(1))
        measured[r] = [human(m.group(i)) for i in (2, 3, 4, 6)]
        verdicts[r] = {"state": m.group(5), "activations_vs_planner_percent": float(m.group(7))}
    if len(measured) != np:
        raise ValueError(f"09_5d's measured memory table has {len(measured)} rows, not {np}")
    get = lambda f: int(flags[flags.index(f) + 1]) if f in flags else None  # noqa: E731
    layout = {"dp": get("--dp"), "tp": get("--tp") or 1, "pp": get("--pp") or 1, "cp": get("--cp") or 1,
              "micro_batch": get("--micro-batch"), "grad_accum": get("--grad-accum"),
              "schedule": flags[flags.index("--pp-schedule") + 1] if "--pp-schedule" in flags else "1f1b"}
    job = {"model": model.group(1), "machine": "cpu", "seq": int(seq.group(1)), "precision": "fp32",
           "global_batch": layout["dp"] * layout["micro_batch"] * layout["grad_accum"]}
    pred = ctx.series([dict(job, fn="plan_rank", layout=layout, rank=r) for r in range(np)])
    data = {"command": cmd, "make_run_flags": flags, "machine": ctx.machine(), "planner": pred,
            "measured": {"columns": ["params", "grads", "optimizer", "activations"],
                         "ranks": [measured[r] for r in range(np)],
                         "note": "as 09_5d's table prints them, to 0.1 KiB/MiB; the program's own exact comparison "
                                 "with the planner in 'verdict'",
                         "verdict": [verdicts[r] for r in range(np)]}}
    fig, axes = new_figure(f"make run's layout ({model.group(1)}, {' '.join(flags[:8])} ...): memory per rank after "
                           "step 1, measured beside the planner", "Finding the best training configuration — memory")
    ax = axes[0][0]
    kinds = [("params", "#4c72b0"), ("grads", "#dd8452"), ("optimizer", "#55a868"), ("activations", KIND_COLORS["activations"])]
    w = 0.38
    for side, label in ((0, "measured"), (1, "planner")):
        bottom = [0.0] * np
        for k, (kind, color) in enumerate(kinds):
            if side == 0:
                vals = [measured[r][k] for r in range(np)]
            else:
                p = pred["values"]
                vals = [[p[r]["params"], p[r]["grads"], p[r]["master"] + p[r]["optim"], p[r]["activations"]][k]
                        for r in range(np)]
            ax.bar([r + (side - 0.5) * w for r in range(np)], [MiB(v) for v in vals], w * 0.95, bottom=bottom,
                   color=color, alpha=1.0 if side == 0 else 0.45, hatch=None if side == 0 else "//",
                   edgecolor="white" if side == 0 else color, label=f"{kind}" if side == 0 else None)
            bottom = [b + MiB(v) for b, v in zip(bottom, vals)]
    ax.bar([0], [0], color="white", edgecolor="gray", label="left: measured (allocator)")
    ax.bar([0], [0], color="white", edgecolor="gray", hatch="//", label="right: planner (predict_rank)")
    ax.set_xticks(range(np), [f"rank {r}" for r in range(np)])
    ax.set_ylabel("MiB")
    ax.legend(fontsize=8, ncol=2)
    return fig, data


FIGURES = [Figure("ch09_planner_landscape", "09", landscape, "planner"),
           Figure("ch09_memory_measured", "09", memory_measured, "run")]
