"""tools/figures/ch11_precision.py — chapter 11's picture: the loss of the four precision policies and fp16's loss
scale, step by step.

  ch11_loss_curves   one run of `11_mixed_precision --steps 120 --log-every 1` (a Llama of 2 layers, hidden 64,
                     written to a config.json in the scratch folder; the default addition data): each policy's
                     printed loss per step (fp32, bf16, fp16, fp8 from the same weights and batches) and fp16's
                     loss scale per step (it doubles after 100 clean steps, halves on an overflow)

Playbook: "Mixed precision training".
Run: make figures CH=11
"""
import json
import os
import re

from figlib import Figure, new_figure

STEPS = 120
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 64,
         "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 256, "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": True,
         "hidden_act": "silu"}
COLORS = {"fp32": "#000000", "bf16": "#4c72b0", "fp16": "#dd8452", "fp8": "#55a868"}


def curves(ctx):
    path = os.path.join(ctx.tmp, "ch11_llama2x64.json")
    with open(path, "w") as f:
        json.dump(MODEL, f)
    _, out, cmd = ctx.run(1, "11_mixed_precision", ["--model", path, "--steps", STEPS, "--micro-batch", 4, "--log-every", 1], jsonl=False)
    cmd = cmd.replace(path, "LLAMA2x64.json")
    series = {}
    for prec, step, loss, scale in re.findall(r"^\s+(\w+)\s+step\s+(\d+) \| loss ([\d.]+) \| grad norm [\d.]+"
                                              r"(?: \| loss scale ([\d.e+]+))?", out, re.M):
        s = series.setdefault(prec, {"step": [], "loss": []})
        s["step"].append(int(step))
        s["loss"].append(float(loss))
        if scale:  # fp16 only: the policy that scales the loss
            s.setdefault("loss_scale", []).append(float(scale))
    if set(series) != set(COLORS) or any(len(s["step"]) != STEPS for s in series.values()):
        raise ValueError(f"{cmd}: expected {STEPS} step lines for each of {sorted(COLORS)}")
    data = {"command": cmd, "model": MODEL, "machine": ctx.machine(), "series": series}
    fig, axes = new_figure(f"The four precision policies, {STEPS} steps from the same weights and batches (micro-batch 4; a Llama of "
                           "2 layers, hidden 64; GEMMs emulated on the CPU)", "Mixed precision training",
                           ncols=2, figsize=(12, 5), gridspec_kw={"width_ratios": [1.6, 1]})
    ax = axes[0][0]
    for prec, s in series.items():
        ax.plot(s["step"], s["loss"], color=COLORS[prec], lw=1.2 if prec == "fp32" else 1.0,
                ls="-" if prec == "fp32" else "--", label=prec)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (the program's step lines)")
    ax.legend()
    ax = axes[0][1]
    ax.step(series["fp16"]["step"], series["fp16"]["loss_scale"], where="post", color=COLORS["fp16"])
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step")
    ax.set_ylabel("fp16 loss scale")
    ax.set_title("fp16's loss scale: x2 after 100 clean steps", fontsize=9)
    return fig, data


FIGURES = [Figure("ch11_loss_curves", "11", curves, source="run")]
