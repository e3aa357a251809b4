#!/usr/bin/env bash
# real_text_test.sh — the path a reader takes with real text, end to end: tools/prepare_data.py trains a
# byte-level BPE with the tokenizers library on texts Debian ships (/usr/share/common-licenses) and writes
# llm.c shards (train and val); the ids in the shards must be the library's own encoding of the texts;
# chapter 01 trains a small Llama on the train shard with --val-data the val shard, and the val loss must
# fall; --generate must print text that decodes as UTF-8; --export-hf must write a folder that chapter 01
# loads back (--model DIR --steps 0). Skipped, saying why, when the tokenizers package cannot be had.
# Prints "N passed, N failed, N skipped"; `make test CH=01` runs it.
#   bash tests/01_single_gpu/real_text_test.sh        (BIN: the programs' folder, default build/bin)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
if ! $py -c 'import tokenizers' 2>/dev/null && ! bash "$root/scripts/install_hf_python.sh" >/dev/null 2>&1; then
    echo "real_text_test: skipped (no /usr/bin/python3 with the tokenizers package, and pip could not install it)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
texts=(/usr/share/common-licenses/{GPL-3,GPL-2,LGPL-2.1,Apache-2.0,GFDL-1.3,MPL-2.0,Artistic})
texts=($(ls "${texts[@]}" 2>/dev/null))  # the ones this Debian has (base-files ships them)

# 1. the shards hold exactly the library's ids: <|endoftext|> then each file's encoding, val first
out=$($py "$root/tools/prepare_data.py" --train-tokenizer 512 --tokenizer "$TMP/tokenizer.json" --out "$TMP/data" \
      --val-fraction 0.1 "${texts[@]}" 2>&1)
why=$($py - "$TMP" "${texts[@]}" <<'PY' 2>&1
import array, glob, struct, sys
from tokenizers import Tokenizer
d, files = sys.argv[1], sys.argv[2:]
tok = Tokenizer.from_file(f"{d}/tokenizer.json")
want = []
for f in files:
    want += [tok.token_to_id("<|endoftext|>")] + tok.encode(open(f, "rb").read().decode("utf-8")).ids  # the bytes as written
got = []
for path in [f"{d}/data/text_val_000000.bin"] + sorted(glob.glob(f"{d}/data/text_train_*.bin")):
    raw = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    assert magic == 20240520 and version == 1, f"{path}: header {magic} {version}"
    a = array.array("H", raw[1024:])
    assert len(a) == n, f"{path}: {len(a)} tokens, header says {n}"
    got += list(a)
print("" if got == want else f"shards hold {len(got)} ids, the library's encoding {len(want)}; first difference at "
      f"{next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))}")
PY
)
expect_verdict "prepare_data.py: the shards' ids are the tokenizers library's encoding" "$why" \
    "$(grep -o '[0-9]* tokens (vocabulary [0-9]*)' <<<"$out")" "$out"

# 2. training on the train shard lowers the val shard's loss; generation prints decodable text
cat >"$TMP/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
 "tie_word_embeddings": true}
JSON
train=("$BIN/01_single_gpu" --model "$TMP/config.json" --data "llmc:$TMP/data/text_train_*.bin"
       --val-data "llmc:$TMP/data/text_val_000000.bin" --seq 64 --micro-batch 8 --steps 150 --warmup 10 --lr 3e-3
       --min-lr 3e-4 --eval-every 10 --log-every 50 --tokenizer "$TMP/tokenizer.json" --generate "This License"
       --max-new 40 --temperature 0.8 --top-k 40 --export-hf "$TMP/export")
out=$(timeout -k 5 300 "${train[@]}" </dev/null 2>&1)
rc=$?
vals=($(grep -o 'val loss [0-9.]*' <<<"$out" | awk '{print $3}'))
why=""
if [ "$rc" != 0 ]; then why="exit $rc"
elif [ "${#vals[@]}" -lt 2 ]; then why="fewer than two val losses in the log"
elif ! awk -v a="${vals[0]}" -v b="${vals[-1]}" 'BEGIN { exit !(b < a - 0.3) }'; then
    why="val loss ${vals[0]} -> ${vals[-1]} did not fall by 0.3"
fi
expect_verdict "training on the train shard lowers the val loss (--val-data)" "$why" \
    "val loss ${vals[0]:-?} at step 10 -> ${vals[-1]:-?} at step 150" "$out"

text=$(sed -n '/^generate: /,/tokens generated)$/p' <<<"$out" | sed '1d;$d')
n=$(grep -o '([0-9]* tokens generated)' <<<"$out" | grep -o '[0-9]*')
why=""
if [ -z "$n" ] || [ "$n" -lt 1 ]; then why="no generated tokens"
elif ! printf '%s' "$text" | $py -c 'import sys; sys.stdin.buffer.read().decode("utf-8")' 2>/dev/null; then
    why="the generated text is not valid UTF-8"
fi
expect_verdict "--generate prints decodable text" "$why" "$n tokens: $(head -c 80 <<<"$text" | tr '\n' ' ')" "$out"

# 3. the exported folder loads back: no training, only generation from its weights
expect_ok "--export-hf's folder loads back with --model DIR --steps 0" 60 "generate: && tokens generated)" \
    "$BIN/01_single_gpu" --model "$TMP/export" --steps 0 --tokenizer "$TMP/tokenizer.json" --generate "This License" \
    --max-new 8 --seq 64
expect_summary
