"""tools/figures/ch07_schedules.py — chapter 07's pictures: the five pipeline schedules as they ran, and the bubble
against the number of micro-batches.

  ch07_schedules   `07_pipeline_parallel --pp 4 --pp-schedule S --grad-accum 8 --steps 2` for S = afab, 1f1b,
                   interleaved (2 chunks), zb1, dualpipe: the last step's ops of every stage on the logical clock
                   (F = B = W = 1 unit), as the executor recorded them (the program's timeline table)
  ch07_bubble      1f1b at m = 2, 4, 8, 16 micro-batches: the bubble of each stage on the logical clock
                   (the program's table), its formula, and the wall clock (4 ranks on this machine's cores)

The model is a Llama of 8 layers, hidden 128 (written to a config.json in the scratch folder): 8 virtual stages
for interleaved on pp 4 with 2 chunks, and fast enough for 2 cores.
Playbook: "Pipeline parallelism" (AFAB, 1F1B, interleaving, zero bubble, DualPipe).
Run: make figures CH=07
"""
import json
import os
import re

from matplotlib.patches import Patch

from figlib import Figure, new_figure

PP, M, STEPS = 4, 8, 2
SCHEDULES = [("afab", []), ("1f1b", []), ("interleaved", ["--pp-chunks", 2]), ("zb1", []), ("dualpipe", [])]
OP_COLORS = {"F": "#4c72b0", "B": "#dd8452", "W": "#55a868"}
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 128,
         "intermediate_size": 352, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 256, "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": True,
         "hidden_act": "silu"}


def model_path(ctx):
    path = os.path.join(ctx.tmp, "ch07_llama8x128.json")
    with open(path, "w") as f:
        json.dump(MODEL, f)
    return path


_RUNS = {}  # (schedule, m) -> (stdout, command): the bubble figure reuses the timelines' runs at m = M


def run(ctx, schedule, extra, m):
    if (schedule, m) in _RUNS:
        return _RUNS[(schedule, m)]
    args = ["--model", model_path(ctx), "--pp", PP, "--pp-schedule", schedule] + extra + [
        "--grad-accum", m, "--micro-batch", 1, "--steps", STEPS, "--log-every", STEPS, "--eval-every", 0]
    _, out, cmd = ctx.run(PP, "07_pipeline_parallel", args, jsonl=False)
    _RUNS[(schedule, m)] = out, cmd.replace(model_path(ctx), "LLAMA8x128.json")
    return _RUNS[(schedule, m)]


def parse_timeline(out):
    """The program's logical-clock timeline: per stage a list of [op, micro-batch, chunk, start, length] in units."""
    rows = re.findall(r"^\s*stage (\d+) \|(.*)$", out.split("on the logical clock:", 1)[-1], re.M)[:PP]
    if len(rows) != PP:
        raise ValueError("07_pipeline_parallel printed no logical-clock timeline")
    cells = [re.findall(r"([FBW])(\d+)([a-z]?)(-*)\s*|(\.)\s*", body) for _, body in rows]
    # a column is one time unit; its width is the longest label plus a space
    width = max(len(op + mb + ch) for row in cells for op, mb, ch, _, dot in row if not dot) + 1
    stages = []
    for (_, body) in rows:
        ops = []
        for m in re.finditer(r"([FBW])(\d+)([a-z]?)(-*)", body):
            start = m.start() // width
            length = round((m.end() - m.start() + 1) / width)
            ops.append([m.group(1), int(m.group(2)), ord(m.group(3)) - ord("a") if m.group(3) else 0, start, length])
        stages.append(ops)
    return stages


def parse_bubble(out):
    """Per stage: [logical, formula, wall clock] of the program's bubble table."""
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)(?: \([^)]*\))?\s+\|\s+[\d.]+\s+[\d.]+\s+\|\s+([\d.]+)",
                      out, re.M)
    if len(rows) < PP:
        raise ValueError("07_pipeline_parallel printed no bubble table")
    return [[float(a), float(b), float(c)] for _, a, b, c in rows[:PP]]


def schedules(ctx):
    fig, axes = new_figure(f"The five schedules on pp {PP}, {M} micro-batches, as the executor ran them (last of "
                           f"{STEPS} steps, logical clock F = B = W = 1; a Llama of 8 layers, hidden 128)",
                           "Pipeline parallelism — AFAB, 1F1B, interleaved, ZB-H1, DualPipe", nrows=len(SCHEDULES),
                           figsize=(12, 11), sharex=True)
    fig.subplots_adjust(hspace=0.35)
    data = {"pp": PP, "micro_batches": M, "model": MODEL, "machine": ctx.machine(), "schedules": {},
            "columns": ["op", "micro_batch", "chunk", "start", "length"]}
    span = 0
    for i, (name, extra) in enumerate(SCHEDULES):
        out, cmd = run(ctx, name, extra, M)
        stages, bubble = parse_timeline(out), parse_bubble(out)
        data["schedules"][name] = {"command": cmd, "stages": stages, "bubble_logical": [b[0] for b in bubble]}
        ax = axes[i][0]
        for s, ops in enumerate(stages):
            for op, mb, chunk, start, length in ops:
                ax.barh(s, length, left=start, height=0.8, color=OP_COLORS[op], alpha=1.0 if chunk == 0 else 0.6,
                        edgecolor="white", lw=0.6, hatch="//" if chunk else None)
                ax.text(start + length / 2, s, f"{op}{mb}", ha="center", va="center", fontsize=6, color="white")
            span = max(span, max(o[3] + o[4] for o in ops))
        ax.set_ylim(PP - 0.5, -0.5)
        ax.set_yticks(range(PP))
        ax.set_yticklabels([f"stage {s}" for s in range(PP)], fontsize=7)
        ax.set_title(f"{name}{' (2 chunks per stage; hatched: chunk 1)' if extra else ''}{' (hatched: the reverse direction)' if name == 'dualpipe' else ''}: bubble "
                     f"{max(b[0] for b in bubble):.3f} of the busiest stage's compute", fontsize=9, loc="left")
        ax.grid(False)
    for i in range(len(SCHEDULES)):
        axes[i][0].set_xlim(0, span)
    axes[-1][0].set_xlabel("logical time (units of one forward)")
    names = {"F": "forward", "B": "backward (input grad, or B+W fused)", "W": "weight gradient"}
    axes[0][0].legend(handles=[Patch(color=c, label=names[op]) for op, c in OP_COLORS.items()], loc="upper right",
                      fontsize=7, ncol=3)
    return fig, data


def bubble(ctx):
    ms = [2, 4, 8, 16]
    fig, axes = new_figure(f"Bubble against micro-batches, pp {PP} (stage 0; a Llama of 8 layers, hidden 128; "
                           f"{STEPS} steps each, the last one's)", "Pipeline parallelism — the bubble (p-1)/m",
                           ncols=2, figsize=(12, 5.4))
    data = {"pp": PP, "micro_batches": ms, "model": MODEL, "machine": ctx.machine(), "runs": {},
            "columns": ["logical", "formula", "wall_clock"]}
    for name, color in (("1f1b", "#4c72b0"),):
        rows = []
        for m in ms:
            out, cmd = run(ctx, name, [], m)
            rows.append({"m": m, "command": cmd, "stages": parse_bubble(out)})
        data["runs"][name] = rows
        stage0 = [r["stages"][0] for r in rows]
        axes[0][0].plot(ms, [s[0] for s in stage0], "o-", color=color, label=f"{name}: logical clock (measured ops)")
        axes[0][0].plot(ms, [s[1] for s in stage0], "x--", color=color, alpha=0.7, label=f"{name}: formula")
        axes[0][1].plot(ms, [s[2] for s in stage0], "o-", color=color, label=f"{name}: wall clock")
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms)
        ax.set_xticklabels([str(m) for m in ms])
        ax.set_xlabel("micro-batches m")
        ax.set_ylabel("bubble = idle / compute of stage 0")
        ax.legend(fontsize=8)
    axes[0][0].set_title("logical clock (F = B = W = 1)", fontsize=9)
    axes[0][1].set_title(f"wall clock: {PP} ranks on {ctx.machine()['cores']} cores (waiting includes the "
                         "other ranks' compute)", fontsize=8)
    return fig, data


FIGURES = [Figure("ch07_schedules", "07", schedules, source="run"), Figure("ch07_bubble", "07", bubble, source="run")]
