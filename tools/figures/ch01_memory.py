"""tools/figures/ch01_memory.py — chapter 01's pictures: where a training step's memory goes.

  ch01_memory_llama3        Llama 3 8B and 70B in the playbook's bf16 mixed precision: parameters, gradients,
                            optimizer (fp32 master + Adam) and activations against the sequence length, for
                            recompute none / selective / full (formulas.hpp, through formula_dump)
  ch01_activations_measured the allocator's peak of activation bytes in short runs of 01_single_gpu (model small)
                            beside llama_activation_bytes for the same micro-batch

Playbook: "First steps: training on one GPU" — "Memory usage in Transformers", "Activation recomputation".
Run: make figures CH=01
"""
from figlib import KIND_COLORS, Figure, GiB, MiB, new_figure

SEQS = [1024, 2048, 4096, 8192, 16384]
MODES = ["none", "selective", "full"]
SECTION_MEM = "First steps: training on one GPU — Memory usage in Transformers, Activation recomputation"


def memory_llama3(ctx):
    # naive attention: recompute none keeps the (B, heads, T, T) probabilities, the playbook's 5 a s^2 b term;
    # selective drops exactly them; full keeps each layer's input only
    kernel, B, act_bytes = "naive", 1, 2
    models = ["llama3-8b", "llama3-70b"]
    data = {"seq": SEQS, "micro_batch": B, "attention": kernel, "activation_bytes": act_bytes,
            "precision": "bf16 mixed: bf16 weights and gradients, fp32 master and Adam moments (2N+2N+4N+8N)",
            "command": "build/bin/formula_dump (model_state_bf16_mixed, llama_activation_bytes)", "models": {}}
    fig, axes = new_figure("Memory of one training step on one GPU, by kind, against the sequence length",
                           SECTION_MEM, ncols=3, nrows=2, figsize=(12, 7.5), sharex=True)
    for row, model in enumerate(models):
        info = ctx.formulas({"fn": "model", "model": model})
        st = ctx.series([{"fn": "model_state_bf16_mixed", "N": info["params"]}])
        act = {m: ctx.series([{"fn": "llama_activation_bytes", "model": model, "recompute": m, "kernel": kernel,
                               "B": B, "T": s, "bytes": act_bytes} for s in SEQS]) for m in MODES}
        data["models"][model] = {"params_count": info["params"], "state": st, "activations": act}
        state, acts = st["values"][0], {m: act[m]["values"] for m in MODES}
        kinds = [("params", state["params"]), ("grads", state["grads"]), ("optim", state["master"] + state["optim"])]
        for col, mode in enumerate(MODES):
            ax = axes[row][col]
            x = list(range(len(SEQS)))
            bottom = [0.0] * len(SEQS)
            for kind, b in kinds:
                ax.bar(x, [GiB(b)] * len(SEQS), bottom=bottom, color=KIND_COLORS[kind],
                       label={"params": "parameters (bf16)", "grads": "gradients (bf16)",
                              "optim": "optimizer (fp32 master + Adam)"}[kind])
                bottom = [u + GiB(b) for u in bottom]
            ax.bar(x, [GiB(a) for a in acts[mode]], bottom=bottom, color=KIND_COLORS["activations"],
                   label="activations")
            ax.axhline(GiB(80e9), color="black", lw=0.8, ls="--")
            ax.set_xticks(x, [f"{s // 1024}K" for s in SEQS])
            ax.set_title(f"{info['name']}, recompute {mode}")
            if col == 0:
                ax.set_ylabel("GiB")
            if row == 1:
                ax.set_xlabel("sequence length (micro-batch 1)")
    for ax in (axes[0][0], axes[1][0]):
        ax.text(0.02, GiB(80e9), "80 GB (H100)", va="bottom", fontsize=8, transform=ax.get_yaxis_transform())
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig, data


MEASURE_SEQS = [64, 128, 256]
MEASURE_B = 4


def activations_measured(ctx):
    model = "small"
    line_seqs = list(range(16, 257, 8))
    data = {"model": model, "micro_batch": MEASURE_B, "attention": "naive", "activation_bytes": 4,
            "machine": ctx.machine(), "formula": {}, "measured": {}, "commands": []}
    fig, axes = new_figure("Activation memory of model small (fp32, naive attention): measured vs formula",
                           "First steps: training on one GPU — Activation memory, Activation recomputation")
    ax = axes[0][0]
    colors = {"none": "#c44e52", "selective": "#dd8452", "full": "#4c72b0"}
    for mode in MODES:
        series = ctx.series([{"fn": "llama_activation_bytes", "model": model, "recompute": mode, "kernel": "naive",
                              "B": MEASURE_B, "T": s, "bytes": 4} for s in line_seqs])
        data["formula"][mode] = dict(series, seq=line_seqs)
        line = series["values"]
        ax.plot(line_seqs, [MiB(b) for b in line], color=colors[mode], label=f"formula, recompute {mode}")
        measured = []
        for s in MEASURE_SEQS:
            recs, _, cmd = ctx.run(1, "01_single_gpu", ["--model", model, "--seq", s, "--micro-batch", MEASURE_B,
                                                        "--recompute", mode, "--attention", "naive", "--steps", 1,
                                                        "--warmup", 0, "--eval-every", 0, "--log-every", 1])
            measured.append(recs[-1]["mem"]["activations"]["peak"])
            data["commands"].append(cmd)
        data["measured"][mode] = {"seq": MEASURE_SEQS, "bytes": measured}
        ax.plot(MEASURE_SEQS, [MiB(b) for b in measured], "o", color=colors[mode], ms=8, mfc="none", mew=2,
                label=f"measured (allocator's peak), recompute {mode}")
    ax.set_xlabel(f"sequence length (micro-batch {MEASURE_B})")
    ax.set_ylabel("activation MiB (peak)")
    ax.legend()
    return fig, data


FIGURES = [
    Figure("ch01_memory_llama3", "01", memory_llama3, "formula"),
    Figure("ch01_activations_measured", "01", activations_measured, "run"),
]
