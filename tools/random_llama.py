#!/usr/bin/env python3
"""random_llama.py — a small random Llama that transformers saves: the stand-in for a downloaded model.

No weights can be downloaded here, so chapter 09's "Real models" run loads this folder instead. transformers
builds the model and initialises it its own way, as a fresh model from the hub would be (tools/hf_reference.py
make scales its weights up for the loading tests instead). The shape: 4 layers, hidden 64, ffn 176, 4 query
heads and 2 kv heads (GQA), the embedding tied to the head, a vocabulary of 512 (the BPE that
tools/prepare_data.py --train-tokenizer 512 trains), and a llama3 rope_scaling block.

  /usr/bin/python3 tools/random_llama.py /tmp/hf09/llama

Needs torch and transformers (4.4x for Debian's torch 1.13): scripts/install_hf_python.sh.
Playbook: none (the stand-in for a downloaded checkpoint).
"""
import sys


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: random_llama.py OUT_DIR (the folder save_pretrained writes)")
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        sys.exit(f"random_llama: needs PyTorch and transformers, which {sys.executable} cannot import ({e}): "
                 "bash scripts/install_hf_python.sh")
    torch.manual_seed(0)  # the same weights on every run
    # llama3 rope_scaling, scaled down: wavelengths below 64/4 positions kept, above 64 divided by 8
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, rope_scaling=rope)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(sys.argv[1])
    n = sum(p.numel() for p in model.parameters())
    print(f"random_llama: a random LlamaForCausalLM of {n} parameters (4 layers, hidden 64, GQA 4/2, tied) "
          f"saved to {sys.argv[1]}")


if __name__ == "__main__":
    main()
