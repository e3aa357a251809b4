"""tools/figures/ch06_ring.py — chapter 06's picture: which attention blocks each cp rank computes at each step of
the ring, contiguous against zig-zag sharding, and the work per rank.

  ch06_ring_blocks   two runs of `06_context_parallel --cp 4 --steps 1` (--cp-shard contiguous, zigzag): the
                     program's own table of the blocks each rank computed at each ring step (layer 0 of one
                     micro-batch) drawn on the (query, key) plane of the causal mask, and its table of the work
                     per rank ((query, key) pairs, beside the formula)

Playbook: "Context parallelism" (ring attention, zig-zag load balancing).
Run: make figures CH=06
"""
import re

from figlib import Figure, new_figure

CP, SEQ = 4, 32
RANK_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3", "#8c8c8c"]


def parse(stdout):
    """The run's tables: chunk size, [(rank, step, q, k, diagonal)], {rank: (blocks, pairs, formula pairs)}."""
    m = re.search(r"(\d+) chunks of (\d+) tokens", stdout)
    if not m:
        raise ValueError("06_context_parallel printed no 'N chunks of K tokens' line")
    chunk = int(m.group(2))
    blocks = []
    for line in stdout.splitlines():
        row = re.match(r"\s*cp rank (\d+) \([^)]*\) \|(.*)$", line)
        if not row:
            continue
        for step, cell in enumerate(row.group(2).split("|")):
            for q, k, mark in re.findall(r"q(\d+)·k(\d+)(.)", cell):
                blocks.append([int(row.group(1)), step, int(q), int(k), mark == "◪"])
    work = {}
    for r, b, p, fp in re.findall(r"cp rank (\d+):\s+(\d+) blocks per layer,\s+(\d+) pairs\s+formula\s+\d+ blocks,"
                                  r"\s+(\d+) pairs", stdout):
        work[int(r)] = [int(b), int(p), int(fp)]
    if not blocks or len(work) != CP:
        raise ValueError("06_context_parallel: the ring table or the work table is missing from its output")
    return chunk, blocks, work


def ring(ctx):
    fig, axes = new_figure(f"Ring attention on cp {CP} (model small, --seq {SEQ}, one step of micro-batch 1): the blocks each rank "
                           "computes, labelled by ring step", "Context parallelism — ring attention, zig-zag",
                           ncols=3, figsize=(15, 5.4), gridspec_kw={"width_ratios": [1, 1, 0.8]})
    data = {"cp": CP, "seq": SEQ, "machine": ctx.machine(), "runs": {},
            "columns_blocks": ["cp_rank", "ring_step", "query_chunk", "key_chunk", "diagonal"],
            "columns_work": ["blocks_per_layer", "pairs", "formula_pairs"]}
    for i, shard in enumerate(["contiguous", "zigzag"]):
        _, out, cmd = ctx.run(CP, "06_context_parallel", ["--cp", CP, "--cp-shard", shard, "--seq", SEQ, "--steps", 1,
                                                          "--micro-batch", 1, "--eval-every", 0], jsonl=False)
        chunk, blocks, work = parse(out)
        data["runs"][shard] = {"command": cmd, "chunk_tokens": chunk, "blocks": blocks,
                               "work": {str(r): w for r, w in sorted(work.items())}}
        ax = axes[0][i]
        for r, s, q, k, diag in blocks:
            x0, y0 = k * chunk, q * chunk
            if diag:  # the causal diagonal block: its lower triangle only (key <= query)
                pts = [(x0, y0), (x0, y0 + chunk), (x0 + chunk, y0 + chunk)]
            else:
                pts = [(x0, y0), (x0 + chunk, y0), (x0 + chunk, y0 + chunk), (x0, y0 + chunk)]
            ax.fill([p[0] for p in pts], [p[1] for p in pts], color=RANK_COLORS[r], alpha=0.75, lw=0.5, ec="white")
            ax.text(x0 + chunk * (0.3 if diag else 0.5), y0 + chunk * (0.7 if diag else 0.5), str(s), ha="center",
                    va="center", fontsize=8, color="white", weight="bold")
        ax.set_xlim(0, SEQ)
        ax.set_ylim(SEQ, 0)
        ax.set_aspect("equal")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        ax.set_title(f"--cp-shard {shard}: {SEQ // chunk} chunks of {chunk} tokens\n(colour: cp rank; number: "
                     "ring step)", fontsize=9)
        ax.grid(False)
    ax = axes[0][2]
    width = 0.38
    for i, shard in enumerate(["contiguous", "zigzag"]):
        w = data["runs"][shard]["work"]
        ranks = [int(r) for r in w]
        ax.bar([r + (i - 0.5) * width for r in ranks], [w[str(r)][1] for r in ranks], width,
               color="#8c8c8c" if i == 0 else "#4c72b0", label=f"{shard} (measured)")
        ax.scatter([r + (i - 0.5) * width for r in ranks], [w[str(r)][2] for r in ranks], marker="_", s=200,
                   color="black", zorder=5, label="formula" if i == 1 else None)
    ax.set_xticks(range(CP))
    ax.set_xlabel("cp rank")
    ax.set_ylabel("(query, key) pairs (the program's count)")
    ax.set_title("work per rank: contiguous grows with the rank,\nzig-zag is even", fontsize=9)
    ax.legend(fontsize=8)
    for i in range(CP):
        axes[0][0].fill([], [], color=RANK_COLORS[i], label=f"cp rank {i}")
    axes[0][0].legend(loc="upper right", fontsize=7)
    return fig, data


FIGURES = [Figure("ch06_ring_blocks", "06", ring, source="run")]
