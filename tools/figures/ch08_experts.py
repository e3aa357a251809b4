"""tools/figures/ch08_experts.py — chapter 08's picture: the tokens each expert receives, step by step, without
balancing and with the two remedies.

  ch08_expert_load   three runs of `08_expert_parallel` on 2 ranks (ep 2, the default MoE model), the same seed and
                     data: --moe-balance none | aux | bias (--moe-bias-rate 0.01); from each run's --log-jsonl,
                     layer 0's tokens per expert per step (as multiples of the mean) and MaxVio per step

Playbook: "Expert parallelism" (load balancing).
Run: make figures CH=08
"""
from figlib import Figure, new_figure

STEPS = 30
RUNS = [("none", []), ("aux", []), ("bias", ["--moe-bias-rate", 0.01])]
COLORS = {"none": "#c44e52", "aux": "#4c72b0", "bias": "#55a868"}


def load(ctx):
    fig, axes = new_figure(f"Tokens per expert per step, MoE layer 0 ({STEPS} steps of 08_expert_parallel on 2 ranks, "
                           "ep 2, micro-batch 2)", "Expert parallelism — load balancing: aux loss, bias",
                           ncols=5, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1, 1, 1, 0.06, 1.3]})
    data = {"steps": STEPS, "machine": ctx.machine(), "runs": {}}
    vmax = 3.0
    for i, (mode, extra) in enumerate(RUNS):
        recs, _, cmd = ctx.run(2, "08_expert_parallel", ["--moe-balance", mode] + extra + [
            "--steps", STEPS, "--micro-batch", 2, "--log-every", 10, "--eval-every", 0])
        if len(recs) != STEPS or "tokens_per_expert_layer0" not in recs[0]:
            raise ValueError(f"{cmd}: expected {STEPS} JSONL records with tokens_per_expert_layer0")
        layer0 = [r["tokens_per_expert_layer0"] for r in recs]
        maxvio = [r["maxvio"] for r in recs]
        data["runs"][mode] = {"command": cmd + " --log-jsonl F", "tokens_per_expert_layer0": layer0,
                              "maxvio": maxvio, "loss": [r["loss"] for r in recs]}
        rel = [[v / (sum(row) / len(row)) for v in row] for row in layer0]  # (steps, experts) multiples of the mean
        ax = axes[0][i]
        im = ax.imshow([list(col) for col in zip(*rel)], aspect="auto", cmap="RdBu_r", vmin=0, vmax=vmax,
                       extent=(0.5, STEPS + 0.5, len(rel[0]) - 0.5, -0.5))
        ax.set_title(f"--moe-balance {mode}{' (rate 0.01)' if extra else ''}", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel("expert")
        ax.grid(False)
        axes[0][4].plot(range(1, STEPS + 1), maxvio, color=COLORS[mode], label=mode)
    # the colour bar in a column of its own: one taken from the panels' space overlaps them after tight_layout
    fig.colorbar(im, cax=axes[0][3], label="tokens / mean (1 = balanced)")
    ax = axes[0][4]
    ax.set_xlabel("step")
    ax.set_ylabel("MaxVio = max / mean - 1 (mean of the layers)")
    ax.set_title("imbalance per step", fontsize=9)
    ax.legend(fontsize=8)
    return fig, data


FIGURES = [Figure("ch08_expert_load", "08", load, source="run")]
