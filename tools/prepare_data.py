#!/usr/bin/env python3
"""prepare_data.py — text files -> llm.c token shards (train and val) with a Hugging Face tokenizer.json.

Chapter 01's --data llmc:GLOB reads what this writes, and --val-data the held-out shard, whose loss the step
log then prints. Each file is one document; documents are joined with the tokenizer's end-of-text token
(<|endoftext|>, or --eos), as llm.c's own scripts do. The first --val-fraction of the tokens is the val
shard, the rest is cut into train shards of --shard-tokens.

Shard format (llm.c, data/data_common.py): a header of 256 little-endian int32 (magic 20240520, version,
token count, zeros), then the tokens: version 1 uint16 when the vocabulary fits 65536, else version 2 uint32
(Llama 3's 128256).

  # with a model's tokenizer (SmolLM-135M's tokenizer.json from the downloaded folder)
  /usr/bin/python3 tools/prepare_data.py --tokenizer ~/SmolLM-135M/tokenizer.json --out data/ my_texts/*.txt
  # or train a byte-level BPE of 512 tokens on the texts first (written to the --tokenizer path)
  /usr/bin/python3 tools/prepare_data.py --train-tokenizer 512 --tokenizer data/tokenizer.json --out data/ \\
      /usr/share/common-licenses/GPL-3
  build/bin/01_single_gpu --model cfg.json --data 'llmc:data/text_train_*.bin' --val-data llmc:data/text_val_000000.bin

Each file is read as written: its bytes decoded as UTF-8, line ends (CRLF, lone CR) kept, so the shards hold
the tokenizer's ids of the file itself (a text-mode read would turn CRLF into LF: other ids). A file that is
empty, not UTF-8 (Latin-1, say) or unreadable is refused, naming it, before anything is written.

Needs the tokenizers package, not PyTorch: `bash scripts/install_hf_python.sh --tokenizers-only`.
Tested by tests/01_single_gpu/real_text_test.sh and prepare_data_test.sh (line ends, bad encodings, refusals).
"""
import argparse
import array
import os
import struct
import sys

MAGIC = 20240520
HEADER_INTS = 256


def refuse(message):
    sys.exit(f"prepare_data: {message}")


def import_tokenizers():
    try:
        import tokenizers
    except ImportError as e:
        refuse(f"needs the Python package tokenizers (Hugging Face's), which {sys.executable} cannot import ({e}). "
               "Install it alone (PyTorch is not needed) with `bash scripts/install_hf_python.sh --tokenizers-only`, "
               f"or `{sys.executable} -m pip install tokenizers`")
    return tokenizers


def read_text(path):
    """The file's text as written: UTF-8 bytes decoded, line ends kept. Refuses naming the file."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        refuse(f"cannot read {path}: {e.strerror}")
    if not data:
        refuse(f"{path} is empty: every file is one document, and an empty one has no text to train on")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        refuse(f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} (line {line}) {e.reason}. "
               "Convert it first, e.g. from Latin-1: iconv -f latin1 -t utf-8 FILE > FILE.utf8")


def write_shard(path, ids, vocab):
    version, code = (1, "H") if vocab <= 65536 else (2, "I")
    header = struct.pack(f"<{HEADER_INTS}i", MAGIC, version, len(ids), *([0] * (HEADER_INTS - 3)))
    a = array.array(code, ids)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        f.write(header)
        f.write(a.tobytes())


def train_tokenizer(tk, files, vocab_size, path, eos):
    Tokenizer, decoders, models, pre_tokenizers, trainers = (tk.Tokenizer, tk.decoders, tk.models, tk.pre_tokenizers,
                                                             tk.trainers)
    # byte-level BPE as GPT-2 and SmolLM build theirs: every byte a symbol, GPT-2's pre-tokenizer regex
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[eos],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(files, trainer)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tok.save(path)
    print(f"prepare_data: trained a byte-level BPE of {tok.get_vocab_size()} tokens on {len(files)} file(s) -> {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", help="text files (UTF-8), one document each")
    p.add_argument("--tokenizer", required=True, help="tokenizer.json (read, or written by --train-tokenizer)")
    p.add_argument("--train-tokenizer", type=int, default=0, metavar="VOCAB",
                   help="first train a byte-level BPE of this many tokens on the files")
    p.add_argument("--out", required=True, help="folder for the shards")
    p.add_argument("--name", default="text", help="shard names: NAME_val_000000.bin, NAME_train_000000.bin, ...")
    p.add_argument("--val-fraction", type=float, default=0.1, help="share of the tokens held out for val")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per train shard")
    p.add_argument("--eos", default="<|endoftext|>", help="the token that separates documents")
    a = p.parse_args()
    if not 0 < a.val_fraction < 1:
        p.error(f"--val-fraction {a.val_fraction} must be in (0, 1)")
    if a.shard_tokens < 1:
        p.error(f"--shard-tokens {a.shard_tokens} must be >= 1")
    texts = [read_text(f) for f in a.files]  # every file checked before anything is written
    tk = import_tokenizers()
    if a.train_tokenizer:
        train_tokenizer(tk, a.files, a.train_tokenizer, a.tokenizer, a.eos)
    try:
        tok = tk.Tokenizer.from_file(a.tokenizer)
    except Exception as e:  # the library raises a bare Exception for a missing or malformed file
        refuse(f"cannot load the tokenizer {a.tokenizer}: {e}")
    vocab = tok.get_vocab_size()
    eos = tok.token_to_id(a.eos)
    if eos is None:
        p.error(f"the tokenizer {a.tokenizer} has no token {a.eos!r} to separate documents (--eos)")
    ids = []
    for text in texts:
        ids.append(eos)  # every document starts after an end of text, as llm.c's shards do
        ids.extend(tok.encode(text).ids)
    n_val = max(1, int(len(ids) * a.val_fraction))
    os.makedirs(a.out, exist_ok=True)
    val_path = os.path.join(a.out, f"{a.name}_val_000000.bin")
    write_shard(val_path, ids[:n_val], vocab)
    train = ids[n_val:]
    paths = []
    for i in range(0, len(train), a.shard_tokens):
        paths.append(os.path.join(a.out, f"{a.name}_train_{len(paths):06d}.bin"))
        write_shard(paths[-1], train[i:i + a.shard_tokens], vocab)
    print(f"prepare_data: {len(ids)} tokens (vocabulary {vocab}) from {len(a.files)} file(s): {n_val} in {val_path}, "
          f"{len(train)} in {len(paths)} train shard(s) ({paths[0]} ...)")


if __name__ == "__main__":
    main()
