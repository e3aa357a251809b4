#!/usr/bin/env python3
"""torch_moe.py — Mixtral's sparse MoE block in PyTorch, to check pentatron's MoE model (chapter 08).

Playbook: "Expert parallelism". torch_reference.py is an independent PyTorch Llama; this file swaps its MLP for
the MoE block as Hugging Face transformers writes it (MixtralSparseMoeBlock): router logits -> softmax over
the experts -> top-k -> the k weights renormalised -> each expert a SwiGLU (w1 gate, w3 up, w2 down) on the
tokens that chose it, its output weighted and added back (index_add_). Nothing of pentatron's C++ is used:
the weights and the batch come from its dump, and the comparison is of what both compute, in float64 here:
  logits, the language-model loss, the balance loss, every gradient (of loss + balance loss), and the
  weights after 5 AdamW steps (with global grad-norm clipping).
The balance loss is chapter 08's (08_expert_parallel/router.hpp), written here from its definition: per MoE
layer and sequence s of T tokens, B_s = E/(k T) sum_e count_{s,e} P_{s,e} (count: the sequence's choices of
expert e, P: its mean softmax score), weighted by s's share n_s / G of the target tokens, times aux_coef,
summed over layers. (transformers' load_balancing_loss_func pools all layers and tokens instead.)
No capacity here (Mixtral drops nothing): the dump is made without one.
The top-k is a step function: over the AdamW steps float32 and float64 drift apart (Adam moves a weight whose
gradient is near zero by about lr, whatever that gradient's sign), and a token at a near tie may choose
another expert here than in float32. The dump carries pentatron's choices (routing.bin); where a token's
choice differs from ours, it must sit at a near tie (its k-th and (k+1)-th probabilities within 1e-5 at the
initial weights, where only rounding differs, 1e-2 after steps), and it then follows our choice so the runs
stay comparable (counted and printed); a difference at a token that is not at a near tie is a mismatch.
Adam is the other step function: it turns a small but non-zero gradient into a step of about lr whose sign the
last bits decide, so such elements are left out of the weights' comparison after the steps (counted).

  build/bin/08_expert_parallel --dp 1 --ep 1 --dump-reference /tmp/moe     # writes the dump (+ moe.json)
  /usr/bin/python3 tools/torch_moe.py /tmp/moe                               # exit 0 when everything agrees
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402  (the Llama, the dump reader, the comparison)


class MixtralLlama(ref.Llama):
    """torch_reference's Llama with Mixtral's sparse MoE block as the MLP of every layer."""

    def __init__(self, cfg, moe, tensors, flat, ours):
        super().__init__(cfg, tensors, flat)
        self.moe = moe
        self.routing = []  # per layer of the last forward: (router_logits, selected_experts)
        self.margin = float("inf")  # the smallest gap between a token's k-th and (k+1)-th probability seen
        self.ours = ours            # (forwards, layers, N, k): pentatron's choices
        self.forward_index = -1     # which of ours the current forward is
        self.tie_tol = 1e-5
        self.followed = []          # (forward, layer, token, gap) where we took pentatron's choice at a near tie
        self.mismatched = []        # the same where the gap was not a near tie

    def forward(self, tokens):
        self.routing = []
        self.forward_index += 1
        return super().forward(tokens)

    def mlp(self, L, xn):
        B, T, h = xn.shape
        E, k = self.moe["experts"], self.moe["top_k"]
        hidden = xn.reshape(-1, h)
        router_logits = hidden @ self.w(L + "block_sparse_moe.gate.weight").T           # (N, E)
        routing_weights = torch.nn.functional.softmax(router_logits, dim=1)
        probs = routing_weights
        routing_weights, selected_experts = torch.topk(routing_weights, k, dim=-1)      # (N, k)
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
        if k < E:
            top = torch.topk(probs.detach(), k + 1, dim=-1).values
            gap = top[:, k - 1] - top[:, k]
            self.margin = min(self.margin, float(gap.min()))
            ours = self.ours[self.forward_index, int(L.split(".")[2])]                  # (N, k)
            differ = (selected_experts.sort(-1).values != ours.sort(-1).values).any(-1)
            for n in torch.nonzero(differ).flatten().tolist():
                (self.followed if float(gap[n]) <= self.tie_tol else self.mismatched).append(
                    (self.forward_index, L, n, float(gap[n])))
            if differ.any():  # follow ours at those tokens: the same Mixtral weights, on our choice
                selected_experts = torch.where(differ[:, None], ours, selected_experts)
                routing_weights = probs.gather(1, selected_experts)
                routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
        final = torch.zeros_like(hidden)
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=E).permute(2, 1, 0)  # (E, k, N)
        for e in range(E):
            idx, top_x = torch.where(expert_mask[e])
            current = hidden[top_x]
            X = L + f"block_sparse_moe.experts.{e}."
            out = (torch.nn.functional.silu(current @ self.w(X + "w1.weight").T) * (current @ self.w(X + "w3.weight").T))
            out = (out @ self.w(X + "w2.weight").T) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, out)
        self.routing.append((router_logits.view(B, T, E), selected_experts.view(B, T, k)))
        return final.view(B, T, h)


def balance_loss(model, targets, global_tokens):
    """aux_coef * sum over layers and sequences of (n_s / G) * E/(k T) * sum_e count_{s,e} * mean_t p_{t,e}"""
    E, k, coef = model.moe["experts"], model.moe["top_k"], model.moe["aux_coef"]
    total = torch.zeros(())
    for logits, selected in model.routing:
        B, T, _ = logits.shape
        probs = logits.softmax(-1)                                                       # (B, T, E)
        counts = torch.nn.functional.one_hot(selected, E).sum(dim=(1, 2)).to(probs.dtype)  # (B, E), no gradient
        share = (targets.view(B, T) >= 0).sum(1).to(probs.dtype) / global_tokens        # (B) n_s / G
        total = total + (share * (E / (k * T)) * (counts * probs.mean(1)).sum(-1)).sum()
    return coef * total


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torch_moe.py DUMP_DIR (written by 08_expert_parallel --dump-reference DUMP_DIR)")
    torch.set_default_dtype(torch.float64)
    d = sys.argv[1]
    for name in ("meta.json", "moe.json"):
        if not os.path.exists(os.path.join(d, name)):
            sys.exit(f"torch_moe: {os.path.join(d, name)} not found; run 08_expert_parallel --dump-reference {d} first")
    meta, moe = json.load(open(os.path.join(d, "meta.json"))), json.load(open(os.path.join(d, "moe.json")))
    if moe["naming"] != "mixtral" or moe["sigmoid_scores"] or not moe["norm_topk"] or moe["shared_experts"] or moe["first_dense"]:
        sys.exit("torch_moe: this checks Mixtral's block (softmax, renormalised top-k, no shared experts, no dense layer)")
    cfg, B, T, G = meta["config"], meta["B"], meta["T"], meta["global_tokens"]
    tensors = meta["tensors"]
    tokens = ref.load(os.path.join(d, "tokens.bin"), "<i4", (B, T))
    targets = ref.load(os.path.join(d, "targets.bin"), "<i4", (B * T,))
    layers = cfg["n_layers"]
    ours = ref.load(os.path.join(d, "routing.bin"), "<i4").view(moe["routing_forwards"], layers, B * T, moe["top_k"])
    model = MixtralLlama(cfg, moe, tensors, ref.load(os.path.join(d, "params0.bin"), "<f4"), ours[1:])
    ok = True

    def objective():
        logits = model(tokens)
        lm = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-1, reduction="sum") / G
        return logits, lm, balance_loss(model, targets, G)

    # 1. logits, both losses and every gradient at the initial weights
    logits, lm, aux = objective()
    (lm + aux).backward()
    ok &= ref.close("logits", ref.load(os.path.join(d, "logits.bin"), "<f4"), logits.detach(), 1e-4, 1e-5)
    ok &= ref.close("loss", torch.tensor([meta["loss"]]), lm.detach().reshape(1), 1e-5, 0)
    ok &= ref.close("balance loss", torch.tensor([moe["aux_loss"]]), aux.detach().reshape(1), 1e-5, 0)
    grads = ref.load(os.path.join(d, "grads.bin"), "<f4")
    for name, key in model.names:
        t = next(t for t in tensors if t["name"] == name)
        g = model.p[key].grad.reshape(-1)
        ok &= ref.close("grad " + name, grads[t["offset"]: t["offset"] + t["numel"]], g, 1e-3, 1e-6 * float(g.abs().max()) + 1e-9)

    # 2. five AdamW steps on the same batch, loss + balance loss, global grad-norm clipping
    a = meta["adamw"]
    model.tie_tol = 1e-2  # after steps the two routers have drifted apart: see the top of this file
    opt = ref.make_adamw(model, tensors, a)
    losses = []
    # An element whose gradient is within rounding of zero but not zero (a sum that cancels, as in an expert
    # that saw a token or two) gets an Adam step of about lr of either sign, decided by the last bits: such
    # elements are left out of the weights' comparison (counted), the rest must agree to 5% of a step.
    decided = {key: torch.ones_like(model.p[key], dtype=torch.bool) for _, key in model.names}
    for _ in range(meta["steps"]):
        model.zero_grad()
        _, lm, aux = objective()
        (lm + aux).backward()
        for _, key in model.names:
            g = model.p[key].grad
            decided[key] &= (g == 0) | (g.abs() > 1e-4 * float(g.abs().max()))  # an exact 0 is exact on both sides
        losses.append(float(lm))
        torch.nn.utils.clip_grad_norm_(model.parameters(), a["grad_clip"])
        opt.step()
    ok &= ref.close_step_losses(meta["step_losses"], losses)
    flat5 = ref.load(os.path.join(d, "params5.bin"), "<f4")
    left_out = 0
    for name, key in model.names:  # as torch_reference.py: within 5% of one step (lr) in absolute terms
        t = next(t for t in tensors if t["name"] == name)
        keep = decided[key].reshape(-1)
        left_out += int((~keep).sum())
        if keep.any():  # (an expert no token chose in any step has nothing left to compare)
            ok &= ref.close(f"weights after {meta['steps']} steps " + name, flat5[t["offset"]: t["offset"] + t["numel"]][keep],
                            model.p[key].detach().reshape(-1)[keep], 1e-4, 0.05 * a["lr"])
    print(f"weights compared after the steps: all but {left_out} element(s) whose gradient was not 0 but within "
          f"1e-4 of its tensor's largest at some step")
    # the top-k is a step function: a token whose k-th and (k+1)-th probabilities are within float32 rounding
    # (~1e-7) may choose differently here and in float32, and then weights part by a whole step
    print(f"smallest gap between a token's k-th and (k+1)-th router probability over the run: {model.margin:.2e}")
    for f, L, n, gap in model.followed:
        print(f"note {'initial forward' if f == 0 else f'AdamW step {f}'}, {L}token {n}: a near tie (gap {gap:.1e}) "
              "chose other experts in float64; pentatron's choice followed")
    for f, L, n, gap in model.mismatched:
        print(f"FAIL {'initial forward' if f == 0 else f'AdamW step {f}'}, {L}token {n}: other experts chosen, "
              f"but the gap {gap:.1e} is no near tie")
    ok &= not model.mismatched
    print(f"routing: {sum(1 for _ in model.followed)} near-tie token(s) followed, {len(model.mismatched)} mismatched, "
          f"over {model.forward_index + 1} forwards x {layers} layers x {B * T} tokens")
    print("torch_moe: " + ("all agree" if ok else "MISMATCH"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
