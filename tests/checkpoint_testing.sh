#!/usr/bin/env bash
# checkpoint_testing.sh — what the checkpoint tests of chapters 01-08 share (sourced after expect_fail.sh; it is
# no test itself). A test trains an uninterrupted run that saves at step 5 (--save-every 5, --steps 10), resumes
# from that checkpoint in the same or another layout, and compares steps 6-10 of the two --log-jsonl files.
#   ckpt_run LABEL LIMIT_S COMMAND...        a run that must exit 0 (a PASS/FAIL line of its own); its output
#                                            is left in $ckpt_last_output
#   ckpt_compare LABEL FULL RESUMED bitwise  steps 6-10: loss, grad norm and (fp16) loss scale equal bit for
#                                            bit (JSON doubles are printed round-trip: equal text, equal bits)
#   ckpt_compare LABEL FULL RESUMED RTOL     within RTOL relative (another layout sums in another order)
#   ckpt_grep LABEL TEXT                     the last ckpt_run's output has the line TEXT (a PASS/FAIL line)
#   ckpt_same_bytes LABEL FILE FILE          the two files are equal byte for byte (an --export-hf twice)
#   ckpt_first_loss LABEL RTOL LOG LOG...    step 1's loss is the same in every --log-jsonl file, within RTOL
#                                            relative (0: bit for bit); the losses are printed
# The uninterrupted runs' own steps 1-5 are not compared: they are the same run.

ckpt_run() {
    local label=$1 limit=$2 out rc why=""
    shift 2
    out=$(timeout -k 5 "$limit" "$@" </dev/null 2>&1)
    rc=$?
    [ "$rc" != 0 ] && why="exit $rc"
    expect_verdict "$label" "$why" "exit $rc" "$out"
    ckpt_last_output=$out
}

ckpt_compare() {
    local label=$1 full=$2 resumed=$3 mode=$4 out why
    out=$(python3 - "$full" "$resumed" "$mode" <<'PY'
import json, sys
full, res, mode = sys.argv[1:4]
try:
    a = {r["step"]: r for r in map(json.loads, open(full))}
    b = {r["step"]: r for r in map(json.loads, open(res))}
except Exception as e:
    print(f"cannot read the logs: {e}"); sys.exit()
bad, worst = [], 0.0
for s in range(6, 11):
    if s not in a or s not in b:
        bad.append(f"step {s} missing"); continue
    for k in ("loss", "grad_norm", "loss scale"):
        if k not in a[s] and k not in b[s]: continue
        if k not in a[s] or k not in b[s]:
            bad.append(f"step {s}: {k} in one log only"); continue
        x, y = a[s][k], b[s][k]
        ok = x == y if mode == "bitwise" else abs(x - y) <= float(mode) * abs(x)
        worst = max(worst, abs(x - y) / max(abs(x), 1e-300))
        if not ok: bad.append(f"step {s} {k} {x!r} vs {y!r}")
if set(b) & set(range(1, 6)): bad.append("the resumed run logged steps 1-5")
print("; ".join(bad[:4]))
print(f"largest relative difference {worst:.1e}")
PY
)
    why=$(head -n 1 <<<"$out")
    expect_verdict "$label" "$why" "steps 6-10, $mode: $(tail -n 1 <<<"$out")" ""
}

ckpt_grep() {
    local why=""
    grep -qF -- "$2" <<<"$ckpt_last_output" || why="no '$2' in the output"
    expect_verdict "$1" "$why" "$(grep -F -m 1 -- "$2" <<<"$ckpt_last_output" | cut -c 1-160)" "$ckpt_last_output"
}

ckpt_same_bytes() {
    local why=""
    if [ ! -s "$2" ] || [ ! -s "$3" ]; then why="$2 or $3 is missing or empty"
    elif ! cmp -s "$2" "$3"; then why="they differ: $(cmp "$2" "$3" 2>&1 | head -n 1)"
    fi
    expect_verdict "$1" "$why" "$(stat -c %s "$2" 2>/dev/null) bytes" ""
}

ckpt_first_loss() {
    local label=$1 rtol=$2 out why
    shift 2
    out=$(python3 - "$rtol" "$@" <<'PY'
import json, sys
rtol, logs = float(sys.argv[1]), sys.argv[2:]
try:
    losses = [next(r for r in map(json.loads, open(f)) if r["step"] == 1)["loss"] for f in logs]
except Exception as e:
    print(f"cannot read step 1 of the logs: {e}"); print(""); sys.exit()
worst = max(abs(x - losses[0]) / abs(losses[0]) for x in losses)
print("" if worst <= rtol else f"largest relative difference {worst:.1e} > {rtol:g}")
print("losses " + ", ".join(repr(x) for x in losses) + f"; largest relative difference {worst:.1e}")
PY
)
    why=$(head -n 1 <<<"$out")
    expect_verdict "$label" "$why" "$(tail -n 1 <<<"$out")" ""
}
