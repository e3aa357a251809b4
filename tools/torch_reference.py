#!/usr/bin/env python3
"""torch_reference.py — an independent PyTorch implementation of pentatron's Llama, used to check ours.

Chapter 01 (playbook: "First steps: training on one GPU"). Our C++ model has no autograd: every backward is
written by hand. This script rebuilds the same model in PyTorch (its own code, no pentatron import), loads
the weights and the batch that our program dumped, and compares, at fp32 tolerances:
  logits, loss, the gradient of every parameter tensor, and the weights after 5 AdamW steps
  (with global grad-norm clipping), step by step.
PyTorch computes in float64 here, so it is the accurate side of the comparison.

  build/bin/01_single_gpu --model tiny --dump-reference /tmp/ref     # writes the dump
  /usr/bin/python3 tools/torch_reference.py /tmp/ref                  # exit 0 when everything agrees
  /usr/bin/python3 tools/torch_reference.py /tmp/ref --write-golden F # also write PyTorch's values to F

--write-golden keeps a sample of what PyTorch computed as JSON: the inputs' fingerprint, the loss, the logits'
strided samples, sum of squares and per-row loss, each gradient's and each 5-step weight's samples, sum of
squares and largest |x|, the step losses. Written only when everything agrees, so that a machine
without PyTorch can still check our model against it: tests/01_single_gpu/test_golden.cpp compares a fresh
dump with the committed files (PENTA_WRITE_GOLDEN=1 on that test regenerates them through this script).

Dump format (all little-endian, row-major): meta.json (config, batch shape, AdamW settings, our losses,
the tensor table {name, offset, shape, decay}); params0.bin, grads.bin, params5.bin (f32, the flat buffers);
tokens.bin, targets.bin (i32, B*T); logits.bin (f32, B*T x vocab).
"""
import json
import math
import os
import sys

import torch


def load(path, dtype, shape=None):
    # f32 files come back in torch's default float dtype (float64 for the check), i32 files as int64
    import numpy as np
    a = np.fromfile(path, dtype=dtype)
    t = torch.from_numpy(a.astype("int64")) if dtype == "<i4" else torch.from_numpy(a).to(torch.get_default_dtype())
    return t if shape is None else t.reshape(shape)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    # Hugging Face Llama: element i pairs with i + hd/2 (rotate_half); inv_freq in float32 as HF computes it
    hd = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    freqs = pos.to(torch.float32)[:, None] * inv_freq[None, :]          # (T, hd/2)
    emb = torch.cat([freqs, freqs], dim=-1).to(x.dtype)                 # (T, hd)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Llama(torch.nn.Module):
    def __init__(self, cfg, tensors, flat):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict()
        self.names = []
        for t in tensors:
            n = t["numel"] = math.prod(t["shape"])
            value = flat[t["offset"]: t["offset"] + n].reshape(t["shape"]).clone()
            key = t["name"].replace(".", "__")
            self.p[key] = torch.nn.Parameter(value)
            self.names.append((t["name"], key))

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, tokens):  # tokens (B, T) -> logits (B*T, V)
        c = self.cfg
        B, T = tokens.shape
        nh, nkv, h = c["n_heads"], c["n_kv_heads"], c["hidden"]
        hd = h // nh
        pos = torch.arange(T)
        x = self.w("model.embed_tokens.weight")[tokens]                   # (B, T, h)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for i in range(c["n_layers"]):
            L = f"model.layers.{i}."
            xn = rms_norm(x, self.w(L + "input_layernorm.weight"), c["norm_eps"])
            q = (xn @ self.w(L + "self_attn.q_proj.weight").T).view(B, T, nh, hd)
            k = (xn @ self.w(L + "self_attn.k_proj.weight").T).view(B, T, nkv, hd)
            v = (xn @ self.w(L + "self_attn.v_proj.weight").T).view(B, T, nkv, hd)
            q, k = rope(q, pos, c["rope_theta"]), rope(k, pos, c["rope_theta"])
            rep = nh // nkv                                                 # GQA: kv head j serves rep query heads
            k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
            s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)       # (B, nh, T, T)
            s = s.masked_fill(~mask, float("-inf"))
            o = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v).reshape(B, T, nh * hd)
            x = x + o @ self.w(L + "self_attn.o_proj.weight").T
            xn = rms_norm(x, self.w(L + "post_attention_layernorm.weight"), c["norm_eps"])
            x = x + self.mlp(L, xn)
        x = rms_norm(x, self.w("model.norm.weight"), c["norm_eps"])
        head = self.w("model.embed_tokens.weight") if c["tied_embeddings"] else self.w("lm_head.weight")
        return (x @ head.T).reshape(B * T, -1)

    def mlp(self, L, xn):  # the SwiGLU MLP of the layer whose names start with L; tools/torch_moe.py overrides it
        g = xn @ self.w(L + "mlp.gate_proj.weight").T
        u = xn @ self.w(L + "mlp.up_proj.weight").T
        return (torch.nn.functional.silu(g) * u) @ self.w(L + "mlp.down_proj.weight").T


def make_adamw(model, tensors, a):
    """torch's AdamW with our settings `a` (meta.json's "adamw"): the matrices decay, the norm weights (1-D)
    do not. Decided here from the shapes, not from the dump's "decay" flags, so a model that decays its norms
    disagrees with this one."""
    shapes = {t["name"]: t["shape"] for t in tensors}
    decay = [model.p[k] for n, k in model.names if len(shapes[n]) == 2]
    no_decay = [model.p[k] for n, k in model.names if len(shapes[n]) != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": a["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])


def close(name, ours, ref, rtol, atol):
    ours, ref = ours.reshape(-1), ref.reshape(-1)
    err = (ours - ref).abs() - (atol + rtol * ref.abs())
    worst = int(err.argmax())
    ok = bool((err <= 0).all())
    rel = float(((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-30)))
    print(f"{'ok  ' if ok else 'FAIL'} {name:<52} max|diff|/max|ref| {rel:.2e}"
          + ("" if ok else f"  (worst element {worst}: ours {float(ours[worst]):.6g}, torch {float(ref[worst]):.6g})"))
    return ok


def close_step_losses(ours, ref):
    """The losses of the AdamW steps, ours (float32) against ref (float64). The first step's loss is at the
    initial weights: 1e-5, as the loss above. After an update, Adam's tilt of the elements with near-zero
    gradients (see the weights after the steps) moves the loss by more than rounding does: at step 5, the
    dense `far` case parts by 1.4e-5 relative with OpenBLAS's AVX-512 sgemm and 7.8e-6 with its AVX2 one
    (OPENBLAS_CORETYPE=Haswell), tools/torch_moe.py's MoE model by 1.9e-5 and 1.1e-5. A wrong moment, decay
    or clip is whole steps off and fails the weights' comparison instead."""
    ok = close("loss of the first AdamW step", torch.tensor(ours[:1]), torch.tensor(ref[:1]), 1e-5, 0)
    return close("losses of the later AdamW steps", torch.tensor(ours[1:]), torch.tensor(ref[1:]), 1e-4, 0) and ok


GOLDEN_SAMPLES = 64  # elements kept of each tensor, evenly strided


def samples(x):
    """GOLDEN_SAMPLES elements of the flat tensor x (all of them when it has no more): one in each of
    GOLDEN_SAMPLES equal stretches, at an offset that varies from stretch to stretch (so not always the same
    column of a matrix), with the whole tensor's sum of squares and largest |x| (a change anywhere moves the sum)."""
    x = x.reshape(-1)
    n = x.numel()
    step = n // GOLDEN_SAMPLES
    idx = list(range(n)) if step <= 1 else [k * step + (k * 40503 + 1) % step for k in range(GOLDEN_SAMPLES)]
    return {"index": idx, "value": [float(x[i]) for i in idx], "sum_squares": float((x * x).sum()),
            "max_abs": float(x.abs().max())}


def row_stats(logits, targets):
    """Per token row of the logits: its sum of squares and its loss (logsumexp minus the target's logit;
    the logsumexp alone for an ignored target), so a change at any one position shows."""
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(1, targets.clamp_min(0)[:, None])[:, 0]
    loss = torch.where(targets >= 0, lse - picked, lse)
    return {"row_sum_squares": [float(v) for v in (logits * logits).sum(-1)], "row_loss": [float(v) for v in loss]}


def write_golden(record, path):
    """record as JSON, one line per entry (one per tensor in "grads" and "weights_after_steps"), so a
    regenerated file's diff shows which values moved."""
    def entry(key, value, indent):
        if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            inner = ",\n".join(entry(k, v, indent + " ") for k, v in value.items())
            return f"{indent}{json.dumps(key)}: {{\n{inner}\n{indent}}}"
        return f"{indent}{json.dumps(key)}: {json.dumps(value)}"
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(entry(k, v, " ") for k, v in record.items()) + "\n}\n")


def main():
    args = sys.argv[1:]
    golden = None
    if len(args) == 3 and args[1] == "--write-golden":
        golden, args = args[2], args[:1]
    if len(args) != 1:
        sys.exit("usage: torch_reference.py DUMP_DIR [--write-golden FILE] (DUMP_DIR written by "
                 "01_single_gpu --dump-reference DUMP_DIR)")
    torch.set_default_dtype(torch.float64)
    d = args[0]
    meta_path = os.path.join(d, "meta.json")
    if not os.path.exists(meta_path):
        sys.exit(f"torch_reference: {meta_path} not found; run 01_single_gpu --dump-reference {d} first")
    meta = json.load(open(meta_path))
    cfg, B, T = meta["config"], meta["B"], meta["T"]
    V = cfg["vocab"]
    tensors = meta["tensors"]
    tokens = load(os.path.join(d, "tokens.bin"), "<i4", (B, T))
    targets = load(os.path.join(d, "targets.bin"), "<i4", (B * T,))
    flat0 = load(os.path.join(d, "params0.bin"), "<f4")
    model = Llama(cfg, tensors, flat0)
    ok = True
    # what the values were computed from: a fresh dump whose inputs differ is a changed test, not a wrong model
    record = {"dump": {k: meta[k] for k in ("config", "B", "T", "steps", "adamw", "global_tokens")},
              "inputs": {"params0_sum_squares": float((flat0 * flat0).sum()),
                         "tokens": [int(v) for v in tokens.reshape(-1)], "targets": [int(v) for v in targets]}}

    def loss_fn():
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-1, reduction="sum")
        return logits, loss / meta["global_tokens"]

    # A model far from its initialisation (reference_testing.hpp's `far`: matrices N(0, 0.3^2)) has peaked
    # attention, and the softmax's backward subtracts nearly equal terms: f32 rounding then reaches a few 1e-6 of
    # the largest gradient (2.9e-6 on layer 0's k_proj with OpenBLAS's AVX2 sgemm, on the batch of the addition
    # task with zero operands). Its gradients' floor is 1e-5 of max|g|; a model near initialisation keeps 1e-6.
    peaked = float(flat0.abs().median()) > 0.05  # near init: about 0.013 (0.674 x 0.02); far: about 0.2
    grad_floor = 1e-5 if peaked else 1e-6
    record["grad_floor"] = grad_floor

    # 1. logits, loss and every gradient at the initial weights
    logits, loss = loss_fn()
    loss.backward()
    ok &= close("logits", load(os.path.join(d, "logits.bin"), "<f4"), logits.detach(), 1e-4, 1e-5)
    ok &= close("loss", torch.tensor([meta["loss"]]), loss.detach().reshape(1), 1e-5, 0)
    record["loss"] = float(loss)
    record["logits"] = {**samples(logits.detach()), **row_stats(logits.detach(), targets)}
    record["grads"], record["weights_after_steps"] = {}, {}
    grads = load(os.path.join(d, "grads.bin"), "<f4")
    for name, key in model.names:
        t = next(t for t in tensors if t["name"] == name)
        ours = grads[t["offset"]: t["offset"] + t["numel"]]
        ok &= close("grad " + name, ours, model.p[key].grad.reshape(-1), 1e-3,
                    grad_floor * float(model.p[key].grad.abs().max()) + 1e-9)
        record["grads"][name] = samples(model.p[key].grad)

    # 2. five AdamW steps on the same batch (norm weights without weight decay), global grad-norm clipping
    a = meta["adamw"]
    opt = make_adamw(model, tensors, a)
    model.zero_grad()
    losses = []
    for step in range(meta["steps"]):
        model.zero_grad()
        _, loss = loss_fn()
        loss.backward()
        losses.append(float(loss))
        torch.nn.utils.clip_grad_norm_(model.parameters(), a["grad_clip"])
        opt.step()
    ok &= close_step_losses(meta["step_losses"], losses)
    flat5 = load(os.path.join(d, "params5.bin"), "<f4")
    # Adam divides each gradient by its own running RMS, so an element whose gradient is tiny moves by ~lr
    # whatever its size, and the last bits of f32 vs f64 arithmetic can tilt such a step. Weights must
    # agree to 5% of one step (lr) in absolute terms; real errors (a wrong moment, decay or clip) are
    # whole steps off.
    for name, key in model.names:
        t = next(t for t in tensors if t["name"] == name)
        ours = flat5[t["offset"]: t["offset"] + t["numel"]]
        ok &= close(f"weights after {meta['steps']} steps " + name, ours, model.p[key].detach().reshape(-1),
                    1e-4, 0.05 * a["lr"])
        record["weights_after_steps"][name] = samples(model.p[key].detach())
    record["step_losses"] = losses
    if golden:
        if not ok:
            sys.exit(f"torch_reference: ours and PyTorch disagree, so {golden} is not written")
        write_golden(record, golden)
        print(f"torch_reference: wrote PyTorch's values to {golden}")
    print("torch_reference: " + ("all agree" if ok else "MISMATCH"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
