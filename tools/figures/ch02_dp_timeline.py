"""tools/figures/ch02_dp_timeline.py — chapter 02's picture: a measured timeline of bucketed data parallelism on 2
ranks, backward compute beside each bucket's all-reduce.

  ch02_dp_timeline   `02_data_parallel --dp 2 --steps 3 --trace F` with --bucket-mb 1 (5 buckets, one per layer)
                     and --bucket-mb 25 (model small's 11.5 MiB in ONE bucket): the last step's events as each
                     rank recorded them (steady clock, one clock for the processes of a machine) — the forward, each
                     unit's backward up to the moment its gradients are final, each bucket's all-reduce from its
                     start to the moment a test() or the final wait() saw it complete, and the wait after backward

Playbook: "Data parallelism" (overlap the all-reduce with backward, bucketing).
Run: make figures CH=02
"""
import json
import os

from figlib import Figure, new_figure

STEPS = 3
BUCKET_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3"]


def trace(ctx, bucket_mb):
    path = os.path.join(ctx.tmp, f"ch02_trace_{bucket_mb}")
    _, out, cmd = ctx.run(2, "02_data_parallel", ["--dp", 2, "--bucket-mb", bucket_mb, "--steps", STEPS, "--log-every",
                                                  1, "--eval-every", 0, "--trace", path], jsonl=False)
    events = []
    for r in range(2):
        with open(f"{path}.rank{r}") as f:
            events += [json.loads(line) for line in f if line.strip()]
    last = [e for e in events if e["step"] == STEPS]
    if not any(e["event"] == "start" for e in last):
        raise ValueError(f"{cmd}: the trace holds no bucket start in step {STEPS}")
    t0 = min(e["t"] for e in last)
    rows = [[e["rank"], e["event"], e["index"], round(1e3 * (e["t"] - t0), 3)] for e in last]
    return {"command": cmd.replace(path, "F"), "bucket_mb": bucket_mb, "events": sorted(rows, key=lambda r: (r[0], r[3]))}


def spans(events, rank):
    """compute spans [(label, t0, t1)] and bucket spans {bucket: (t_start, t_done)}, the wait span, of one rank"""
    ev = [e for e in events if e[0] == rank]
    t = {k: [e for e in ev if e[1] == k] for k in ("step", "backward", "ready", "start", "done", "wait", "waited")}
    compute = [("forward", t["step"][0][3], t["backward"][0][3])]
    prev = t["backward"][0][3]
    for _, _, unit, at in t["ready"]:
        compute.append((f"u{unit}", prev, at))
        prev = at
    buckets = {}
    for _, _, b, at in t["start"]:
        done = [e[3] for e in t["done"] if e[2] == b]
        buckets[b] = (at, done[0] if done else at)
    wait = (t["wait"][0][3], t["waited"][0][3]) if t["wait"] and t["waited"] else None
    return compute, buckets, wait


def timeline(ctx):
    runs = [trace(ctx, 1), trace(ctx, 25)]
    for run in runs:  # the drawn spans as series, per rank: each bucket's start and seen-complete times (ms)
        for rank in range(2):
            _, buckets, _ = spans(run["events"], rank)
            run[f"rank{rank}_bucket_start_ms"] = [buckets[b][0] for b in sorted(buckets)]
            run[f"rank{rank}_bucket_done_ms"] = [buckets[b][1] for b in sorted(buckets)]
    fig, axes = new_figure(f"Bucketed data parallelism on 2 ranks (model small, step {STEPS} of {STEPS}): backward "
                           "compute and each bucket's all-reduce, as the ranks recorded them",
                           "Data parallelism — overlap the all-reduce with backward, bucketing", nrows=2,
                           figsize=(12, 6.5))
    fig.subplots_adjust(hspace=0.45)
    for ax, run in zip((axes[0][0], axes[1][0]), runs):
        labels, y = [], 0
        for rank in range(2):
            compute, buckets, wait = spans(run["events"], rank)
            for label, a, b in compute:
                ax.barh(y, b - a, left=a, height=0.7, color="#8c8c8c" if label == "forward" else "#bfbfbf",
                        edgecolor="white", lw=0.8)
                ax.text((a + b) / 2, y, label, ha="center", va="center", fontsize=7)
            labels.append(f"rank {rank} compute")
            y += 1
            for b, (a, d) in sorted(buckets.items()):
                lane = y - 0.35 + 0.7 * (b + 0.5) / len(buckets)  # one sub-lane per bucket
                ax.barh(lane, max(d - a, 0.2), left=a, height=0.6 / len(buckets),
                        color=BUCKET_COLORS[b % len(BUCKET_COLORS)], alpha=0.85)
                ax.text(a, lane, f"b{b} ", fontsize=6, va="center", ha="right")
            if wait:
                ax.barh(y + 0.45, wait[1] - wait[0], left=wait[0], height=0.15, color="black")
            labels.append(f"rank {rank} all-reduce")
            y += 1
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        n = len(spans(run["events"], 0)[1])
        ax.set_title(f"--bucket-mb {run['bucket_mb']}: {n} bucket(s); grey: forward, then each unit's backward "
                     "(u5 = head ... u0 = embedding); colour: a bucket from start to seen complete; black: the wait "
                     "after backward", fontsize=8, loc="left")
        ax.grid(axis="y", visible=False)
    axes[1][0].set_xlabel("ms since the step began (the earlier rank)")
    for ax in (axes[0][0], axes[1][0]):
        ax.set_xlim(0, max(max(e[3] for e in r["events"]) for r in runs) * 1.02)
    data = {"steps": STEPS, "machine": ctx.machine(), "columns": ["rank", "event", "index", "ms"], "runs": runs}
    return fig, data


FIGURES = [Figure("ch02_dp_timeline", "02", timeline, source="run")]
