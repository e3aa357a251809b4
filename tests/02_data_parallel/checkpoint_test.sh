#!/usr/bin/env bash
# checkpoint_test.sh — checkpoints at dp 2 (chapter 02), on CPU ranks:
#   1. bit-exact resume: a 10-step run saves at step 5 (and 10), printing 12.00 bytes a parameter over both
#      ranks' files; a run resumed from step_000005 logs steps 6-10 with the same loss and grad norm, bit for bit;
#   2. crash safety: the same run with the save of step 10 made slow (PENTA_CKPT_SLOW_STEP=10,
#      PENTA_CKPT_SLOW_SECONDS: a rank sleeps after writing half its pieces), and the rank in the middle of its
#      write killed with SIGKILL: rank 0 (it holds every piece; rank 1's file is empty and done at once),
#      found by OMPI_COMM_WORLD_RANK in its environment, its rank_00000.bin.tmp present when it is killed.
#      `latest` must still name step_000005, step_000010 must not exist, and `--resume latest` continues
#      bit-exactly from step 5;
#   3. a flipped byte in rank 0's shard is detected on resume, naming the file (CRC-32); under plain data
#      parallelism rank 0 writes every value (the replicas' owner), rank 1's file is empty;
#   4. async saves (--save-async) resume bit-exactly too.
# Prints "N passed, N failed, N skipped"; `make test CH=02` runs it.
#   bash tests/02_data_parallel/checkpoint_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
here=$(dirname "$0")
source "$here/../expect_fail.sh"
source "$here/../checkpoint_testing.sh"
expect_needs_mpi "checkpoint test (chapter 02)"
run=($MPIRUN -np 2 "$BIN/02_data_parallel" --dp 2 --model small --seq 16 --micro-batch 2 --steps 10 --warmup 2
     --log-every 1 --eval-every 0)

ckpt_run "dp 2: 10 steps, saved at 5 and 10" 300 "${run[@]}" --save "$TMP/a" --save-every 5 --log-jsonl "$TMP/full.jsonl"
ckpt_grep "dp 2: 12 bytes a parameter over both ranks' files (each value written once)" \
    "12.00 bytes/param (param 4.00 + m 4.00 + v 4.00)"
ckpt_run "dp 2: resumed from step 5" 300 "${run[@]}" --resume "$TMP/a/step_000005" --log-jsonl "$TMP/res.jsonl"
ckpt_compare "dp 2: resumed steps 6-10 equal the uninterrupted run's" "$TMP/full.jsonl" "$TMP/res.jsonl" bitwise

# 2. SIGKILL in the middle of the save of step 10
(PENTA_CKPT_SLOW_STEP=10 PENTA_CKPT_SLOW_SECONDS=60 timeout -k 5 200 "${run[@]}" --save "$TMP/b" --save-every 5 \
    >"$TMP/crash.out" 2>&1 </dev/null) &
job=$!
killed="" writing=""
# rank 0's pid: of the processes whose command line matches (timeout's and mpirun's do too), the one whose
# environment says world rank 0
rank0_pid() {
    local p
    for p in $(pgrep -f "$BIN/02_data_parallel --dp 2 .*--save $TMP/b" || true); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && { echo "$p"; return; }
    done
}
for _ in $(seq 1 600); do  # until rank 0 is inside the save of step 10 (its shard's .tmp file exists)
    if [ -e "$TMP/b/step_000010.tmp/rank_00000.bin.tmp" ]; then
        pid=$(rank0_pid)
        # still mid-write at the kill: the slow hook holds it there for 60 s
        [ -n "$pid" ] && [ -e "$TMP/b/step_000010.tmp/rank_00000.bin.tmp" ] && kill -9 "$pid" && killed=$pid &&
            writing=$(ls "$TMP/b/step_000010.tmp" | tr '\n' ' ')
        break
    fi
    sleep 0.2
done
wait "$job"
latest=$(cat "$TMP/b/latest" 2>/dev/null)
why=""
[ -z "$killed" ] && why="rank 0 was not found mid-write in the save of step 10 (no rank_00000.bin.tmp, or no process of world rank 0)"
[ -z "$why" ] && [ "$latest" != "step_000005" ] && why="latest is '$latest', not step_000005"
[ -z "$why" ] && [ -e "$TMP/b/step_000010" ] && why="step_000010 exists after the crash"
expect_verdict "SIGKILL of rank 0 in the middle of its write of step 10: latest still names step_000005" "$why" \
    "killed rank 0, pid ${killed:-none}, while step_000010.tmp held: ${writing:-?}" "$(cat "$TMP/crash.out")"
ckpt_run "dp 2: --resume latest after the crash" 300 "${run[@]}" --save "$TMP/b" --resume latest \
    --log-jsonl "$TMP/crash_res.jsonl"
ckpt_compare "dp 2: resumed after the crash, steps 6-10 equal the uninterrupted run's" "$TMP/full.jsonl" \
    "$TMP/crash_res.jsonl" bitwise

# 3. one flipped byte
python3 - "$TMP/a/step_000005/rank_00000.bin" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(4096); b = f.read(1); f.seek(4096); f.write(bytes([b[0] ^ 0x01]))
PY
expect_fail "a flipped byte in rank 0's shard is named on resume" 120 \
    "rank_00000.bin is corrupted && CRC-32" "${run[@]}" --resume "$TMP/a/step_000005"

# 4. async
ckpt_run "dp 2: async saves at 5 and 10" 300 "${run[@]}" --save "$TMP/c" --save-every 5 --save-async
ckpt_run "dp 2: resumed from the async step 5" 300 "${run[@]}" --resume "$TMP/c/step_000005" \
    --log-jsonl "$TMP/async_res.jsonl"
ckpt_compare "dp 2: resumed from an async save, steps 6-10 equal" "$TMP/full.jsonl" "$TMP/async_res.jsonl" bitwise
expect_summary
