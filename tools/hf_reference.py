#!/usr/bin/env python3
"""hf_reference.py — Hugging Face transformers as the reference for pentatron's checkpoint loading and export.

The acceptance tests of --model DIR and --export-hf DIR (common/hf_checkpoint.hpp) need models that
transformers itself wrote and read. No weights can be downloaded here, so this script makes random ones:

  make DIR [options]   a random LlamaForCausalLM (GQA, tied or not, a llama3 rope_scaling block, a head_dim of
                       its own, f32 or bf16, one file or several; --hub-init: transformers' own initialisation,
                       the stand-in for a downloaded model that chapter 09's README trains) — or with --experts E
                       a MixtralForCausalLM of E experts (--top-k per token, each --ffn wide) — saved with
                       save_pretrained, and
                       DIR/reference.safetensors: a batch of tokens and targets, transformers' logits, loss and
                       the gradient of every weight (computed in float64 from the saved weights), and the
                       rotary table inv_freq exactly as transformers holds it (float32)
  tokenizer OUT FILE.. trains a byte-level BPE with the tokenizers library on the files (GPT-2's ByteLevel
                       pre-tokenizer; --digits puts SmolLM's Digits splitter before it; --split 3 cuts with Llama
                       3's Split regex instead, --split 1 with Qwen2's, as Llama 3's file does: ByteLevel without
                       its regex, ignore_merges, <|begin_of_text|> put first by a TemplateProcessing) and saves OUT
  encode TOK TEXT OUT  the tokenizers library's ids of the file TEXT, one line of integers, to OUT
  split KIND TEXT OUT  the pieces the library's regex engine cuts the file TEXT into with GPT-2's pattern (KIND
                       gpt2), Llama 3's (llama3) or Qwen2's (qwen2), as a JSON list of strings, to OUT
  rope CONFIG OUT      transformers' rotary table for a config.json (ROPE_INIT_FUNCTIONS of its rope_type, what
                       LlamaRotaryEmbedding holds), as the F32 tensor "inv_freq" of the safetensors file OUT
  check DIR OURS       loads DIR with AutoModelForCausalLM.from_pretrained (what --export-hf wrote: a Llama, or a
                       Mixtral for a mixture of experts) and compares its
                       logits on OURS' tokens with OURS' logits (a safetensors file: tokens I32, logits F32);
                       exit 1 when some |ours - theirs| > 1e-5 (|theirs| + max |theirs|)

Needs torch, transformers (4.4x for Debian's torch 1.13) and safetensors: scripts/install_hf_python.sh.
  /usr/bin/python3 tools/hf_reference.py make /tmp/m --tied --llama3 --shards 3
Used by tests/01_single_gpu/hf_testing.cpp.
"""
import argparse
import sys

try:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM
except ImportError as e:
    sys.exit(f"hf_reference: needs PyTorch, transformers and safetensors, which {sys.executable} cannot import "
             f"({e}): bash scripts/install_hf_python.sh")

# the pre-tokenizer regexes common/pretokenize.cpp writes out by hand
SPLIT_PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+",
}


def make(a):
    torch.manual_seed(a.seed)
    cfg = dict(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
               num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=a.max_pos,
               rope_theta=a.theta, tie_word_embeddings=a.tied, torch_dtype=a.dtype)
    if not a.hub_init:  # larger weights than a fresh model's, so that the loading tests' comparisons see them
        cfg.update(rms_norm_eps=1e-5, initializer_range=0.1)
    if a.head_dim:
        cfg["head_dim"] = a.head_dim
    if a.experts:  # Mixtral: every layer's MLP is E experts of intermediate_size, top-k per token, no sliding window
        cfg.update(num_local_experts=a.experts, num_experts_per_tok=a.top_k, sliding_window=None,
                   router_jitter_noise=0.0)
    if a.llama3:  # Llama 3.1's block, scaled down so the tiny model's wavelengths fall in all three bands: with
        # 64 original positions, wavelengths below 64/4 = 16 are kept (2 pi), those above 64 divided by the factor
        # (628, 6283) and those between interpolated (62.8; head_dim 16 adds 19.9 and 199)
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    Config, Model = (MixtralConfig, MixtralForCausalLM) if a.experts else (LlamaConfig, LlamaForCausalLM)
    model = Model(Config(**cfg))
    with torch.no_grad():  # norm weights of 1 would not test the norms' gradients or their loading
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") and not a.hub_init:
                p.add_(0.1 * torch.randn_like(p))
    # float32, as every forward uses it (Mixtral in transformers 4.4x keeps the table in each attention layer)
    rotary = model.model.rotary_emb if hasattr(model.model, "rotary_emb") else model.model.layers[0].self_attn.rotary_emb
    inv_freq = rotary.inv_freq.clone()
    model = model.to(getattr(torch, a.dtype))
    kw = {"max_shard_size": f"{a.shard_kb}KB"} if a.shard_kb else {}
    model.save_pretrained(a.dir, safe_serialization=True, **kw)

    # the reference: what transformers loads from the files it wrote, in float64 (bf16 weights upcast; the
    # rotary table computed afresh in float32, as from_pretrained does whatever the weights' dtype)
    model = Model.from_pretrained(a.dir, torch_dtype=torch.float64)
    g = torch.Generator().manual_seed(a.seed + 1)
    seq = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
    tokens, targets = seq[:, :-1], seq[:, 1:].clone()
    targets[0, 0] = -100  # an ignored target, as our -1
    logits = model(input_ids=tokens).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), targets.reshape(-1), ignore_index=-100)
    loss.backward()
    out = {"tokens": tokens.to(torch.int32).contiguous(), "targets": targets.to(torch.int32).contiguous(),
           "logits": logits.detach().reshape(-1, a.vocab).float().contiguous(),
           "loss": loss.detach().reshape(1).float(), "inv_freq": inv_freq.contiguous()}
    for n, p in model.named_parameters():
        out["grad." + n] = p.grad.float().contiguous()
    save_file(out, f"{a.dir}/reference.safetensors")
    print(f"hf_reference make: a random {type(model).__name__} of {sum(p.numel() for p in model.parameters())} "
          f"parameters ({a.layers} layers, hidden {a.hidden}, {a.dtype}) saved to {a.dir}, with reference.safetensors")


def check(a):
    from transformers import AutoModelForCausalLM  # LlamaForCausalLM, or MixtralForCausalLM for a MoE export
    model = AutoModelForCausalLM.from_pretrained(a.dir, torch_dtype=torch.float64)
    ours = load_file(a.ours)
    tokens = ours["tokens"].long()
    want = model(input_ids=tokens).logits.reshape(-1, model.config.vocab_size)
    got = ours["logits"].double().reshape(want.shape)
    # relative to each value plus the tensor's scale, as the C++ tests' check_close_scaled: float32 sums in
    # another order differ from float64's by a few ulps of the large values, which is huge beside a logit near 0
    err = ((got - want).abs() / (want.abs() + want.abs().max())).max().item()
    print(f"hf_reference check: transformers' {type(model).__name__} loaded {a.dir}; logits {tuple(want.shape)}, "
          f"max |ours - theirs| = {(got - want).abs().max().item():.2e}, "
          f"max |ours - theirs| / (|theirs| + max |theirs|) = {err:.2e} (limit 1e-5)")
    return 0 if err <= 1e-5 else 1


def rope(a):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cfg = LlamaConfig.from_json_file(a.config)
    kind = (cfg.rope_scaling or {}).get("rope_type", "default")
    inv_freq, _ = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")
    save_file({"inv_freq": inv_freq.to(torch.float32).contiguous()}, a.out)
    return 0


def tokenizer(a):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=bool(a.split)))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=a.prefix_space, use_regex=not a.split)
    if a.split:  # Llama 3's tokenizer.json (Qwen2's with \p{N} alone)
        regex = SPLIT_PATTERNS["llama3" if a.split == 3 else "qwen2"]
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), "isolated"), byte_level])
    elif a.digits:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>"] + (["<|begin_of_text|>"] if a.split else [])
    tok.train(a.files, trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=specials, show_progress=False,
                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if a.split:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", bos)])
    tok.save(a.out)
    return 0


def split(a):
    import json
    from tokenizers import Regex, pre_tokenizers
    with open(a.text, encoding="utf-8", newline="") as f:
        pieces = pre_tokenizers.Split(Regex(SPLIT_PATTERNS[a.kind]), "isolated").pre_tokenize_str(f.read())
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump([p for p, _ in pieces], f, ensure_ascii=False)
    return 0


def encode(a):
    from tokenizers import Tokenizer
    with open(a.text, encoding="utf-8", newline="") as f:  # the bytes' line breaks: \r\n stays \r\n
        ids = Tokenizer.from_file(a.tok).encode(f.read()).ids
    with open(a.out, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    for name, default in [("vocab", 96), ("hidden", 32), ("ffn", 64), ("layers", 4), ("heads", 4), ("kv_heads", 2),
                          ("max_pos", 64), ("head_dim", 0), ("seed", 1), ("batch", 2), ("seq", 24), ("shard_kb", 0),
                          ("experts", 0), ("top_k", 2)]:
        m.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    m.add_argument("--theta", type=float, default=10000.0)
    m.add_argument("--tied", action="store_true")
    m.add_argument("--llama3", action="store_true")
    m.add_argument("--hub-init", action="store_true", help="transformers' own initialisation and rms_norm_eps, as "
                   "a fresh model from the hub has (chapter 09's stand-in for a downloaded model)")
    m.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    t = sub.add_parser("tokenizer")
    t.add_argument("out")
    t.add_argument("files", nargs="+")
    t.add_argument("--vocab", type=int, default=512)
    t.add_argument("--digits", action="store_true")
    t.add_argument("--prefix-space", action="store_true")
    t.add_argument("--split", type=int, default=0, choices=[0, 1, 3])
    e = sub.add_parser("encode")
    for name in ("tok", "text", "out"):
        e.add_argument(name)
    s = sub.add_parser("split")
    s.add_argument("kind", choices=sorted(SPLIT_PATTERNS))
    s.add_argument("text")
    s.add_argument("out")
    r = sub.add_parser("rope")
    r.add_argument("config")
    r.add_argument("out")
    c = sub.add_parser("check")
    c.add_argument("dir")
    c.add_argument("ours")
    a = p.parse_args()
    torch.set_grad_enabled(a.cmd == "make")
    sys.exit({"make": make, "check": check, "rope": rope, "split": split, "tokenizer": tokenizer,
              "encode": encode}[a.cmd](a))


if __name__ == "__main__":
    main()
