#!/usr/bin/env bash
# bad_inputs_test.sh — every bad flag value and bad file must end chapter 01's program with an error that
# names it, fast, before any work: never a crash, a hang, a wrapped size or a bare std::bad_alloc.
#
# One row per command line: the arguments, then the text the output must contain (tests/expect_fail.sh:
# exit non-zero, not by a signal, within 10 s). The rows cover the edge values of every flag (zero,
# negative, inf, nan, out of range, not a number), the products of sizes that overflow or exceed their
# limits (common/config.cpp), integers beyond an int's range, the memory a run cannot have
# (memory_bound.cpp), bad models and data files: missing, a directory, not JSON, a bad llm.c header, token ids
# beyond the vocabulary, NaN weights; --save's folder. Control runs: configs transformers reads as the same
# model (no max_position_embeddings, hidden_act swish, a Llama's sliding_window, which transformers' Llama
# ignores: chapter 08 refuses a Mixtral's window shorter than the run's sequences) train one step. A second table (5 s a row) resumes from crafted checkpoints
# (an offset that wraps, a type error, a negative step, a damaged or missing checksum: each named with
# metadata.json and the key; test_file_fuzz.cpp holds the full set) and loads crafted safetensors headers; a
# third runs tools/prepare_data.py on files it must refuse. Chapter 02's
# and later chapters' tables hold the multi-rank rows. Prints "N passed, N failed, N skipped"; `make test
# CH=01` runs it.
#   bash tests/01_single_gpu/bad_inputs_test.sh        (BIN: the programs' folder, default build/bin)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"

# files the rows read: llm.c shards (header: magic, version, token count; then uint16 tokens) and configs
python3 - "$TMP" <<'EOF'
import json, struct, sys
d = sys.argv[1]
def shard(name, tokens, count=None, magic=20240520, version=1):
    header = [magic, version, len(tokens) if count is None else count] + [0] * 253
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))
shard("oov.bin", [i % 64 for i in range(5000)] + [64] + [1] * 100)  # token 64 at index 5000: tiny's vocab is 64
shard("magic.bin", [1] * 100, magic=12345)
shard("version.bin", [1] * 100, version=3)
shard("count.bin", [1] * 100, count=1000)
shard("short.bin", [1] * 10)
open(f"{d}/odd.bin", "wb").write(b"\0" * 101)
open(f"{d}/notjson.json", "w").write("{ hidden_size: 32 ")
base = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 64, "vocab_size": 300, "max_position_embeddings": 64}
json.dump({k: v for k, v in base.items() if k != "vocab_size"}, open(f"{d}/novocab.json", "w"))
json.dump(dict(base, hidden_size=30), open(f"{d}/heads.json", "w"))
json.dump(dict(base, vocab_size=-5), open(f"{d}/negvocab.json", "w"))
json.dump(dict(base, hidden_size=2**40), open(f"{d}/huge.json", "w"))
json.dump(dict(base, hidden_size=8192, intermediate_size=65536, num_hidden_layers=200), open(f"{d}/big.json", "w"))
json.dump(dict(base, attention_bias=True), open(f"{d}/bias.json", "w"))
# a value nested 100000 deep: it parsed, then the dump() of the error message overflowed the stack (SIGSEGV)
open(f"{d}/deep.json", "w").write(json.dumps(base).replace('"hidden_size": 32', '"hidden_size": ' + "[" * 100000 + "]" * 100000))
json.dump(dict(base, rope_scaling={"rope_type": "yarn", "factor": 4.0}), open(f"{d}/yarn.json", "w"))
# what transformers reads the same way (the control runs at the end): a missing max_position_embeddings (its
# default, 2048), hidden_act "swish" (silu's other name), a Llama's sliding_window (transformers' Llama ignores it)
json.dump({k: v for k, v in base.items() if k != "max_position_embeddings"}, open(f"{d}/nomaxpos.json", "w"))
json.dump(dict(base, hidden_act="swish"), open(f"{d}/swish.json", "w"))
json.dump(dict(base, sliding_window=8), open(f"{d}/window.json", "w"))
json.dump(base, open(f"{d}/base.json", "w"))
open(f"{d}/afile", "w").write("a file, not a folder")
import os
for name in ("hfdir", "badst"):  # Hugging Face folders: a config alone; a config and a truncated safetensors file
    os.makedirs(f"{d}/{name}", exist_ok=True)
    json.dump(base, open(f"{d}/{name}/config.json", "w"))
open(f"{d}/badst/model.safetensors", "wb").write(struct.pack("<Q", 1 << 20) + b'{"a": ')
EOF
mkdir -p "$TMP/dir.json"
# a Hugging Face folder whose embedding holds a NaN: exported from the base config, then one float overwritten
"$BIN/01_single_gpu" --model "$TMP/base.json" --steps 0 --export-hf "$TMP/nanst" >/dev/null 2>&1
python3 - "$TMP/nanst/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    begin = json.loads(f.read(n))["model.embed_tokens.weight"]["data_offsets"][0]
    f.seek(8 + n + begin + 4 * 33)  # element [1, 1] of the (300, 32) f32 table
    f.write(struct.pack("<f", float("nan")))
PY

expect_table 10 "$BIN/01_single_gpu" <<'EOF'
# sizes: products that overflow int64 or exceed their limit, and memory the machine does not have (each factor
# an int: only a product of three or more can pass int64)
--micro-batch 1073741823 --seq 2 --grad-accum 2147483647 --steps 2147483647 | --steps 2147483647 × (--micro-batch × --grad-accum × --dp) 2305843005992468481 (the sample ids the run trains on) overflows
--micro-batch 1000000000                  | --micro-batch 1000000000 × --seq 32 (the tokens of one micro-batch) = 32000000000 is too large
--seq 2147483647                          | --micro-batch 16 × --seq 2147483647 (the tokens of one micro-batch) = 34359738352 is too large
--steps 2147483647 --micro-batch 1024     | --steps 2147483647 × (--micro-batch × --grad-accum × --dp) 1024 (the sample ids
--micro-batch 10000000                    | --micro-batch 10000000 × --seq 32, --precision fp32: one rank needs at least && host memory it has
--micro-batch 40000 --seq 256             | one rank needs at least && lower --micro-batch or --seq
# each integer flag's edge values
--micro-batch 0                           | --micro-batch 0 must be >= 1
--micro-batch -3                          | --micro-batch -3 must be >= 1
--grad-accum 0                            | --grad-accum 0 must be >= 1
--seq 1                                   | --seq 1 must be >= 2
--seq 257                                 | --seq 257 must be <= the model's max_seq 256
--steps 0                                 | --steps 0 must be >= 1
# an integer flag holds an int (what the chapters hand it to): beyond, refused by name, never wrapped
--steps 99999999999999999999              | --steps 99999999999999999999 is out of range: at most 2147483647
--micro-batch 2305843009213693952 --seq 8 | --micro-batch 2305843009213693952 is out of range: at most 2147483647
--seq 9223372036854775807                 | --seq 9223372036854775807 is out of range: at most 2147483647
--grad-accum 4294967298                   | --grad-accum 4294967298 is out of range: at most 2147483647
--micro-batch 3000000000                  | --micro-batch 3000000000 is out of range: at most 2147483647
--steps -99999999999                      | --steps -99999999999 is out of range: at least -2147483648
--seed 99999999999999999999               | --seed 99999999999999999999 is out of range: at most 9223372036854775807
--steps 1.5                               | --steps 1.5 must be an integer
--steps ten                               | --steps ten must be an integer
--steps                                   | --steps needs a value
--warmup -1                               | --warmup -1 must be >= 0
--log-every 0                             | --log-every 0 must be >= 1
--eval-every -1                           | --eval-every -1 must be >= 0
--inject-nan -1                           | --inject-nan -1 must be a step of the run
--inject-nan 6 --steps 5                  | --inject-nan 6 must be a step of the run, 1 ... --steps 5
--seed 1e3                                | --seed 1e3 must be an integer
# each float flag's edge values: inf and nan by name, the ranges, out of float range
--lr inf                                  | --lr inf must be a finite number > 0
--lr nan                                  | --lr nan must be a finite number > 0
--lr 0                                    | --lr 0 must be a finite number > 0
--lr -0.001                               | --lr -0.001 must be a finite number > 0
--lr 1e50                                 | --lr 1e50 is out of the range of a float
--lr fast                                 | --lr fast must be a number
--min-lr 1                                | --min-lr 1 must be in [0, --lr 0.002]
--min-lr -inf                             | --min-lr -inf must be in [0, --lr
--weight-decay inf                        | --weight-decay inf must be a finite number >= 0
--weight-decay -0.1                       | --weight-decay -0.1 must be a finite number >= 0
--lr 0.5 --min-lr 0 --weight-decay 2      | --lr 0.5 × --weight-decay 2 = 1 must be < 1
--beta1 1                                 | --beta1 1 must be in [0, 1)
--beta1 -0.5                              | --beta1 -0.5 must be in [0, 1)
--beta2 nan                               | --beta2 nan must be in [0, 1)
--grad-clip inf                           | --grad-clip inf must be a finite number >= 0
--grad-clip -1                            | --grad-clip -1 must be a finite number >= 0
# words, unknown flags, flags of other chapters
--device tpu                              | --device tpu must be auto, cpu or cuda
--recompute most                          | --recompute most must be none, selective, full or offload
--attention fast                          | --attention fast must be naive or flash
--precision fp16                          | --precision fp16: fp16's loss scaler and fp8's GEMM are chapter 11's && build/bin/11_mixed_precision
--precision fp8                           | --precision fp8: fp16's loss scaler and fp8's GEMM are chapter 11's
--bogus 1                                 | unknown flag --bogus
--dp 2                                    | unknown flag --dp
stray                                     | unexpected argument 'stray'
# models: unknown, missing, a directory, not JSON, incomplete, inconsistent, too big to exist or to fit
--model gpt5                              | unknown model preset 'gpt5' (valid: tiny, small
--model $TMP/none.json                    | cannot open Hugging Face config '$TMP/none.json': No such file
--model $TMP/dir.json                     | Hugging Face config '$TMP/dir.json' is a directory
--model $TMP/notjson.json                 | notjson.json is not valid JSON
--model $TMP/deep.json                    | deep.json is nested deeper than 32 levels
--model $TMP/novocab.json                 | novocab.json: missing key "vocab_size"
--model $TMP/heads.json                   | hidden 30 must be a multiple of n_heads 4
--model $TMP/negvocab.json                | vocab -5 must be positive
--model $TMP/huge.json                    | hidden 1099511627776 must be <= 2147483647
--model $TMP/big.json                     | one rank needs at least && a smaller --model
--model llama3-70b --precision bf16       | one rank needs at least && (weights 131.42GiB, gradients 262.83GiB, AdamW 788.50GiB,
--model llama3-70b --steps 0 --export-hf $TMP/out | --steps 0: one rank needs at least 525.67GiB (weights 262.83GiB, gradients 262.83GiB, AdamW 0B (nothing to train)
--model $TMP/bias.json                    | attention_bias = true is not implemented
--model $TMP/yarn.json                    | rope_scaling rope_type = "yarn" is not implemented
--model $TMP/hfdir                        | --model $TMP/hfdir: the folder has a config.json but neither model.safetensors
--model $TMP/badst                        | model.safetensors: the header length 1048576 runs past the end of the file
--model $TMP/nanst                        | $TMP/nanst/model.safetensors: tensor model.embed_tokens.weight holds a non-finite weight, nan at [1, 1]
# data: not a dataset, no file, a directory, bad shards, token ids beyond the vocabulary, too short
--data nosuch                             | --data 'nosuch' is not a dataset (accepted: addition
--data llmc:                              | --data 'llmc:' is not a dataset
--data llmc:$TMP/none_*.bin               | no file '$TMP/none_*.bin'
--data text:$TMP                          | data file '$TMP' is a directory, not a regular file
--data raw:$TMP/odd.bin --model tiny      | odd.bin': 101 bytes is not a whole number of uint16 tokens
--data llmc:$TMP/magic.bin --model tiny   | magic.bin': magic 12345 is not the llm.c shard magic
--data llmc:$TMP/version.bin --model tiny | version.bin': llm.c shard version 3
--data llmc:$TMP/count.bin --model tiny   | count.bin': header says 1000 tokens
--data llmc:$TMP/oov.bin --model tiny     | oov.bin': token 64 at index 5000 (of 5101) is >= the model's vocabulary size 64
--data llmc:$TMP/short.bin --model tiny --seq 16 | short.bin' holds 10 tokens; a sample of sequence length 16 needs T+1 = 17
--data addition --model tiny              | --data addition uses the byte tokenizer (vocabulary 256), larger than the model's vocabulary 64
# generation and the files after training
--max-new 0                               | --max-new 0 must be >= 1
--temperature -1                          | --temperature -1 must be a finite number >= 0
--temperature inf                         | --temperature inf must be a finite number >= 0
--top-k -1                                | --top-k -1 must be >= 0
--generate 12 --model tiny                | the tokenizer bytes (vocabulary 256) has 256 tokens, more than the model's vocabulary 64
--generate 12 --tokenizer $TMP/none.json  | cannot open tokenizer '$TMP/none.json'
--generate 12 --tokenizer $TMP/notjson.json | notjson.json: not valid JSON
--val-data nosuch                         | --val-data nosuch: && is not a dataset
--val-data llmc:$TMP/oov.bin --model tiny | --val-data && oov.bin': token 64 at index 5000
--export-hf /proc/penta                   | --export-hf /proc/penta: cannot create the directory
--save /proc/penta                        | --save /proc/penta: cannot create the directory
--save $TMP/afile                         | --save $TMP/afile: cannot create the directory
# output paths
--log-jsonl $TMP/no/such/dir/log.jsonl --steps 1 | --log-jsonl $TMP/no/such/dir/log.jsonl: cannot open for writing
--dump-reference $TMP/no/such/dir         | --dump-reference $TMP/no/such/dir: cannot create the directory
EOF
# what transformers builds the same model from is accepted: one step each, exit 0
for m in nomaxpos swish window; do
    expect_ok "--model $m.json: read as transformers reads it, one step" 30 "step 1/1" \
        "$BIN/01_single_gpu" --model "$TMP/$m.json" --seq 16 --steps 1 --eval-every 0
done

# crafted checkpoints (issue 30): one real checkpoint of tiny after 1 step, then copies of it with one field
# of metadata.json changed and its checksum rewritten (zlib's CRC-32 is the loader's: the copy that changes
# nothing must load), or the checksum left stale or removed
head -c 4096 /dev/zero >"$TMP/zeros.bin"
ck=(--model tiny --data "raw:$TMP/zeros.bin" --seq 16 --micro-batch 2 --eval-every 0)
"$BIN/01_single_gpu" "${ck[@]}" --steps 1 --save "$TMP/ck" >"$TMP/ck.log" 2>&1 ||
    { echo "bad_inputs_test: the run that saves the checkpoint to craft failed:"; tail -5 "$TMP/ck.log"; }
python3 - "$TMP" <<'PY'
import json, os, shutil, struct, sys, zlib
d = sys.argv[1]
src = f"{d}/ck/step_000001"
meta = json.load(open(f"{src}/metadata.json"))
def craft(name, edit=None, text=None, checksum=True):
    out = f"{d}/ck_{name}"
    shutil.copytree(src, out)
    m = json.loads(json.dumps(meta))
    if edit: edit(m)
    body = (text if text is not None else json.dumps(m, indent=1)).encode()
    open(f"{out}/metadata.json", "wb").write(body)
    if checksum is True: open(f"{out}/metadata.json.crc32", "w").write("%08x  metadata.json\n" % zlib.crc32(body))
    elif checksum is None: os.remove(f"{out}/metadata.json.crc32")
def piece(key, value):
    def edit(m): m["shards"][0]["pieces"][0][key] = value
    return edit
def top(path, value):
    def edit(m):
        o = m
        for k in path[:-1]: o = o[k]
        o[path[-1]] = value
    return edit
craft("same")
craft("offset", piece("offset", 2**64 - 8))
craft("offset_str", piece("offset", "0"))
craft("count", piece("count", 2**62))
craft("rows", piece("rows", 2**31))
craft("kind", piece("kind", 3))
craft("file", top(["shards", 0, "file"], "../../etc/passwd"))
craft("step", top(["step"], -12))
craft("seen", top(["step"], 2))
craft("version", top(["version"], "2"))
craft("hidden", top(["model", "hidden"], "32"))
craft("deep", top(["shards", 0, "coords"], json.loads("[" * 100 + "]" * 100)))
craft("stale", top(["step"], 0), checksum=False)
craft("nosum", checksum=None)
craft("notjson", text='{"format": ')
# safetensors headers in Hugging Face folders (config.json of tiny's shape; only the header matters)
cfg = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
       "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 64}
def st(name, header, data=16, length=None):
    os.makedirs(f"{d}/st_{name}", exist_ok=True)
    json.dump(cfg, open(f"{d}/st_{name}/config.json", "w"))
    h = header if isinstance(header, str) else json.dumps(header)
    n = len(h.encode()) if length is None else length
    open(f"{d}/st_{name}/model.safetensors", "wb").write(struct.pack("<Q", n) + h.encode() + b"\0" * data)
def t(dtype="F32", shape=(2, 2), offsets=(0, 16)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}
st("length", {"a": t()}, length=2**64 - 8)
st("overflow", {"a": t(shape=(2**32, 2**32, 2**32))})
st("past", {"a": t(offsets=(0, 2**64 - 1))})
st("order", {"a": t(offsets=(16, 0))})
st("overlap", {"a": t(offsets=(0, 16)), "b": t(offsets=(8, 24))}, data=24)
st("dtype", {"a": t(dtype="F33")})
st("deep", '{"a": {"dtype": "F32", "shape": ' + "[" * 100000 + "]" * 100000 + ', "data_offsets": [0, 16]}}')
PY

EXPECT_JOBS=2 expect_table 5 "$BIN/01_single_gpu" "${ck[@]}" --steps 3 <<'EOF'
# the control: a copy whose metadata.json is rewritten unchanged loads (and trains), see expect_ok below
--resume $TMP/ck_offset      | $TMP/ck_offset/metadata.json: "shards[0].pieces[0].offset" is 18446744073709551608: the 
--resume $TMP/ck_offset_str  | $TMP/ck_offset_str/metadata.json: "shards[0].pieces[0].offset" must be an integer in [0, 18446744073709551615], is the string "0"
--resume $TMP/ck_count       | $TMP/ck_count/metadata.json: "shards[0].pieces[0].count" must be an integer in [0,
--resume $TMP/ck_rows        | $TMP/ck_rows/metadata.json: "shards[0].pieces[0].rows" must be an integer in [1, 2147483647]
--resume $TMP/ck_kind        | $TMP/ck_kind/metadata.json: "shards[0].pieces[0].kind" must be a string, is the integer 3
--resume $TMP/ck_file        | $TMP/ck_file/metadata.json: "shards[0].file" is "../../etc/passwd", not the name of a file in the step folder
--resume $TMP/ck_step        | $TMP/ck_step/metadata.json: "step" must be an integer in [0, 9223372036854775807], is the integer -12
--resume $TMP/ck_seen        | $TMP/ck_seen/metadata.json: "data.samples_seen" is 2, but step 2 × global_batch 2 is 4
--resume $TMP/ck_version     | $TMP/ck_version/metadata.json: "version" must be an integer in [1, 2], is the string "2"
--resume $TMP/ck_hidden      | $TMP/ck_hidden/metadata.json: "model.hidden" must be an integer in [0, 2147483647], is the string "32"
--resume $TMP/ck_deep        | $TMP/ck_deep/metadata.json is nested deeper than 32 levels
--resume $TMP/ck_stale       | $TMP/ck_stale/metadata.json is damaged or was edited: its CRC-32 is
--resume $TMP/ck_nosum       | $TMP/ck_nosum/metadata.json: metadata.json.crc32 is missing
--resume $TMP/ck_notjson     | $TMP/ck_notjson/metadata.json is not valid JSON
--model $TMP/st_length       | st_length/model.safetensors: the header length 18446744073709551608 runs past the end of the file
--model $TMP/st_overflow     | st_overflow/model.safetensors: tensor 'a': shape [4294967296,4294967296,4294967296] overflows a 64-bit byte count
--model $TMP/st_past         | st_past/model.safetensors: tensor 'a': data_offsets [0, 18446744073709551615] run past the 16 bytes of data
--model $TMP/st_order        | st_order/model.safetensors: tensor 'a': data_offsets [16, 0] end before they begin
--model $TMP/st_overlap      | st_overlap/model.safetensors: tensors 'a' and 'b' overlap
--model $TMP/st_dtype        | st_dtype/model.safetensors: tensor 'a': dtype "F33" is not a safetensors dtype
--model $TMP/st_deep         | st_deep/model.safetensors: the header is nested deeper than 32 levels
EOF
expect_ok "a crafted copy that changes nothing resumes (the rows above fail for their field, not the copy)" 60 \
    "resumed from $TMP/ck_same: step 1" "$BIN/01_single_gpu" "${ck[@]}" --steps 2 --resume "$TMP/ck_same"

# tools/prepare_data.py refuses a file it cannot read as written, naming it, before it writes anything (it checks
# the files before it needs the tokenizers package, so these rows run without it)
printf 'caf\xe9 au lait\n' >"$TMP/latin1.txt"
printf 'ok \xe2\x82' >"$TMP/cut.txt"
: >"$TMP/empty.txt"
printf 'fine\n' >"$TMP/fine.txt"
expect_table 5 /usr/bin/python3 "$(dirname "$0")/../../tools/prepare_data.py" --tokenizer "$TMP/none.json" --out "$TMP/pd" <<'EOF'
$TMP/latin1.txt              | prepare_data: $TMP/latin1.txt is not UTF-8 text: byte 0xe9 at offset 3 (line 1) && iconv -f latin1
$TMP/fine.txt $TMP/cut.txt   | prepare_data: $TMP/cut.txt is not UTF-8 text: byte 0xe2 at offset 3 (line 1) unexpected end of data
$TMP/fine.txt $TMP/empty.txt | prepare_data: $TMP/empty.txt is empty
$TMP/nosuch.txt              | prepare_data: cannot read $TMP/nosuch.txt: No such file or directory
$TMP/dir.json                | prepare_data: cannot read $TMP/dir.json: Is a directory
EOF
why=""
[ -e "$TMP/pd" ] && why="$TMP/pd exists: a refused run wrote something"
expect_verdict "prepare_data.py: the refused runs wrote nothing" "$why" "$(ls "$TMP/pd" 2>&1 | head -3)" ""
expect_summary
