"""tools/figures/ch04_tp_sp.py — chapters 04 and 05's pictures: what tensor parallelism sends, and what sequence
parallelism saves.

  ch04_tp_sp_traffic      bytes one decoder layer's TP boundaries send per micro-batch (forward + backward) against
                          t: formulas.hpp's tp_layer_comm_elements (8(t-1)/t · s b h, f32), the same for TP's
                          all-reduces and SP's all-gather + reduce-scatter pairs; measured points from the per-layer
                          tables 04_tensor_parallel and 05_sequence_parallel print before training
  ch05_sp_activations     the norm/residual regions' activation bytes (x_in, x_mid and the two rstd of every layer)
                          against t: TP keeps every token on every rank, SP 1/t of them
                          (llama_norm_region_activation_bytes); measured points from 05_sequence_parallel

Playbook: "Tensor parallelism" (communication in TP), "Sequence parallelism".
Run: make figures CH=04
"""
import re

from figlib import Figure, MiB, new_figure

MODEL, SEQ, MB = "small", 32, 8
TS = [1, 2, 3, 4, 5, 6, 7, 8]
MEASURED_TS = [2, 4]  # `small` has 4 kv heads: --tp must divide them
FLAGS = ["--model", MODEL, "--seq", SEQ, "--micro-batch", MB, "--steps", 1, "--warmup", 0, "--eval-every", 0,
         "--log-every", 1]


def traffic_tables(stdout):
    """fwd + bwd bytes of layer 0 in each 'tensor-parallel bytes per layer' table, in order"""
    out, in_table = [], False
    for line in stdout.splitlines():
        if line.startswith("tensor-parallel bytes per layer"):
            in_table = True
            continue
        m = re.match(r"\s+0\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", line) if in_table else None
        if m:
            out.append(int(m.group(3)))
            in_table = False
    if not out:
        raise ValueError("no 'tensor-parallel bytes per layer' table in the output:\n" + stdout[-1500:])
    return out


def measure(ctx):
    """runs 04 (TP) and 05 (TP + SP) at each measured t once per figure build; cached on ctx"""
    if getattr(ctx, "_ch04", None) is None:
        m = {"tp_bytes": [], "sp_bytes": [], "tp_norm": [], "sp_norm": [], "commands": []}
        for t in MEASURED_TS:
            _, out, cmd = ctx.run(t, "04_tensor_parallel", ["--tp", t] + FLAGS, jsonl=False)
            m["tp_bytes"].append(traffic_tables(out)[0])
            m["commands"].append(cmd)
            _, out, cmd = ctx.run(t, "05_sequence_parallel", ["--tp", t, "--sp"] + FLAGS, jsonl=False)
            m["sp_bytes"].append(traffic_tables(out)[1])  # the second table: SP's gathers and scatters
            r = re.search(r"norm/residual regions \(measured\)\s+(\d+)\s+(\d+)", out)
            if not r:
                raise ValueError("05_sequence_parallel printed no 'norm/residual regions (measured)' line")
            m["tp_norm"].append(int(r.group(1)))
            m["sp_norm"].append(int(r.group(2)))
            m["commands"].append(cmd)
        ctx._ch04 = m
    return ctx._ch04


def figure_data(ctx, m, tp, sp, **extra):
    """a figure's JSON: the runs' shape, the measured TP and TP + SP points, the commands, the machine"""
    return dict(model=MODEL, seq=SEQ, micro_batch=MB, t=TS, measured={"t": MEASURED_TS, "tp": tp, "sp": sp},
                commands=m["commands"], machine=ctx.machine(), **extra)


def tp_sp_traffic(ctx):
    info = ctx.formulas({"fn": "model", "model": MODEL})
    h = info["hidden"]
    m = measure(ctx)
    series = ctx.series([{"fn": "tp_layer_comm_bytes", "t": t, "s": SEQ, "b": MB, "h": h, "bytes": 4} for t in TS])
    data = figure_data(ctx, m, m["tp_bytes"], m["sp_bytes"], hidden=h, formula=series)
    fig, axes = new_figure(f"Bytes one decoder layer sends per micro-batch (forward + backward), model {MODEL}, "
                           f"s {SEQ}, b {MB}, h {h}, f32",
                           "Tensor parallelism / Sequence parallelism — the communication of each")
    ax = axes[0][0]
    ax.plot(TS, [MiB(v) for v in series["values"]], "-", color="#4c72b0", lw=2,
            label="formula 8(t-1)/t · s b h · 4 bytes: TP's 4 all-reduces = SP's 4 all-gather + reduce-scatter pairs")
    measured_points(ax, m["tp_bytes"], "measured, TP (04_tensor_parallel: f and g)", m["sp_bytes"],
                    "measured, TP + SP (05_sequence_parallel: all-gather / reduce-scatter)",
                    "MiB sent by each rank per layer")
    ax.legend(loc="lower right")
    return fig, data


def measured_points(ax, tp, tp_label, sp, sp_label, ylabel):
    """the measured TP (circles) and TP + SP (crosses) points at MEASURED_TS, and the axes' labels"""
    ax.plot(MEASURED_TS, [MiB(v) for v in tp], "o", color="#4c72b0", ms=10, mfc="none", mew=2, label=tp_label)
    ax.plot(MEASURED_TS, [MiB(v) for v in sp], "x", color="#c44e52", ms=10, mew=2, label=sp_label)
    ax.set_xlabel("t (tensor-parallel ranks)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)


def sp_activations(ctx):
    info = ctx.formulas({"fn": "model", "model": MODEL})
    h, L = info["hidden"], info["layers"]
    m = measure(ctx)
    q = {"fn": "norm_region_activation_bytes", "B": MB, "T": SEQ, "h": h, "layers": L, "bytes": 4}
    tp = ctx.series([dict(q, sp=1) for _ in TS])
    sp = ctx.series([dict(q, sp=t) for t in TS])
    data = figure_data(ctx, m, m["tp_norm"], m["sp_norm"], hidden=h, layers=L, formula={"tp": tp, "sp": sp})
    fig, axes = new_figure(f"Activations of the norm/residual regions (x_in, x_mid, two rstd; {L} layers) per rank, "
                           f"model {MODEL}, s {SEQ}, b {MB}",
                           "Sequence parallelism — the activations TP leaves whole")
    ax = axes[0][0]
    ax.plot(TS, [MiB(v) for v in tp["values"]], "-", color="#4c72b0", lw=2, label="formula, TP: every token on every rank")
    ax.plot(TS, [MiB(v) for v in sp["values"]], "-", color="#c44e52", lw=2, label="formula, TP + SP: 1/t of the tokens")
    measured_points(ax, m["tp_norm"], "measured, TP (05_sequence_parallel, --sp's first pass with f/g)", m["sp_norm"],
                    "measured, TP + SP (05_sequence_parallel --sp)", "MiB per rank, one micro-batch's forward")
    ax.legend()
    return fig, data


FIGURES = [Figure("ch04_tp_sp_traffic", "04", tp_sp_traffic, "run"),
           Figure("ch05_sp_activations", "04", sp_activations, "run")]
