#!/usr/bin/env bash
# prepare_data_test.sh — tools/prepare_data.py keeps a file as written and refuses what it cannot read (issue 30):
#   1. a CRLF file and a lone-CR file: the shards hold the tokenizer's ids of the bytes as written (a text-mode
#      read turned CRLF into LF, other ids), and those differ from the LF file's;
#   2. without the tokenizers package: a message naming the package and how to install it alone, no traceback.
# The refusals of bad files (Latin-1, invalid UTF-8, empty, missing, a folder: each named, nothing written)
# are rows of bad_inputs_test.sh. Part 1 is skipped, saying why, when the tokenizers package cannot be had.
# Prints "N passed, N failed, N skipped"; `make test CH=01` runs it.
#   bash tests/01_single_gpu/prepare_data_test.sh
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
skipped=0

# 2. no tokenizers: a package of that name whose import fails stands in for its absence
mkdir -p "$TMP/notok/tokenizers"
echo 'raise ModuleNotFoundError("No module named tokenizers", name="tokenizers")' >"$TMP/notok/tokenizers/__init__.py"
printf 'one line\n' >"$TMP/lf1.txt"
expect_fail "without the tokenizers package: named, with how to install it alone" 10 \
    "prepare_data: needs the Python package tokenizers && install_hf_python.sh --tokenizers-only" \
    env PYTHONPATH="$TMP/notok" $py "$root/tools/prepare_data.py" --tokenizer "$TMP/none.json" --out "$TMP/o" "$TMP/lf1.txt"

# 1. line ends as written
if ! $py -c 'import tokenizers' 2>/dev/null && ! bash "$root/scripts/install_hf_python.sh" --tokenizers-only >/dev/null 2>&1; then
    echo "prepare_data_test: line ends: skipped (no /usr/bin/python3 with the tokenizers package, and pip could not install it)"
    skipped=1
else
    printf 'Hello world.\nSecond line.\nThird line.\n\nThe end.\n' >"$TMP/lf.txt"
    sed 's/$/\r/' "$TMP/lf.txt" >"$TMP/crlf.txt"
    tr '\n' '\r' <"$TMP/lf.txt" >"$TMP/cr.txt"
    out=$($py "$root/tools/prepare_data.py" --train-tokenizer 300 --tokenizer "$TMP/tok.json" --out "$TMP/d0" \
          /usr/share/common-licenses/GPL-3 2>&1) || echo "$out"
    for f in lf crlf cr; do
        $py "$root/tools/prepare_data.py" --tokenizer "$TMP/tok.json" --out "$TMP/$f" --val-fraction 0.01 \
            "$TMP/$f.txt" >"$TMP/$f.log" 2>&1 || cat "$TMP/$f.log"
    done
    why=$($py - "$TMP" <<'PY' 2>&1
import array, glob, sys
from tokenizers import Tokenizer
d = sys.argv[1]
tok = Tokenizer.from_file(f"{d}/tok.json")
def shard_ids(name):
    ids = []
    for path in [f"{d}/{name}/text_val_000000.bin"] + sorted(glob.glob(f"{d}/{name}/text_train_*.bin")):
        ids += list(array.array("H", open(path, "rb").read()[1024:]))
    return ids
got = {f: shard_ids(f) for f in ("lf", "crlf", "cr")}
want = {f: [tok.token_to_id("<|endoftext|>")] + tok.encode(open(f"{d}/{f}.txt", "rb").read().decode()).ids
        for f in got}
bad = [f"{f}: shards hold {len(got[f])} ids, the encoding of the bytes as written {len(want[f])}"
       for f in got if got[f] != want[f]]
if got["crlf"] == got["lf"] or got["cr"] == got["lf"]:
    bad.append("a CR or CRLF file gave the LF file's ids (its line ends were translated)")
print("; ".join(bad) if bad else f"ids: LF {len(got['lf'])}, CRLF {len(got['crlf'])}, CR {len(got['cr'])}")
PY
)
    expect_verdict "CRLF and lone-CR files: the shards hold the ids of the bytes as written" \
        "$(grep -v '^ids:' <<<"$why")" "$(grep '^ids:' <<<"$why")" "$why"
fi
echo "$expect_passed passed, $expect_failed failed, $skipped skipped"
[ "$expect_failed" = 0 ]
