#!/usr/bin/env bash
# cluster_test.sh — chapter 09 across two real "nodes": network + UTS namespaces on this machine
# (scripts/fake_cluster.sh), mpirun inside node0 starting node1's ranks through the cluster's agent instead of
# ssh, TCP between the nodes, shared memory inside each. Skipped, saying why, without root or where namespaces
# are not permitted (a container without CAP_SYS_ADMIN). On 2 nodes x 2 ranks:
#   1. dp 2 x tp 2 across the nodes (tp inside a node, dp across) trains exactly as the same layout on one node:
#      the step log (--log-jsonl: step, loss, grad norm, lr, accuracy of each step) equal byte for byte;
#   2. placement by host name: the layout table puts ranks 0, 1 on node 0 and 2, 3 on node 1, as mpirun placed
#      them (each rank's `hostname`: node0 node0 node1 node1), and the header says so (not PENTA_NODE_ID);
#      the bytes table puts dp x cp across the nodes and tp inside;
#   3. node1's cable unplugged mid-run (ip link set down at the switch): the job ends, non-zero, and node0's
#      ranks' watchdog (--comm-timeout 5) names ranks 2 and 3 as the ones that did not arrive;
#   4. node1's ranks killed (SIGKILL) mid-run: the job ends at once (well before --comm-timeout 120) naming a
#      rank of node1;
#   5. `fake_cluster.sh down` leaves no namespace, interface or file behind.
# Prints "N passed, N failed, N skipped" like the other tests; `make test CH=09` runs it.
#   bash tests/09_5d/cluster_test.sh     (BIN: the programs' folder; MPIRUN: as make sets it)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"
expect_needs_mpi "cluster test"
FC="$(dirname "$0")/../../scripts/fake_cluster.sh"
export PENTA_CLUSTER=ptest$$  # namespaces and state folder of its own (another test or `make run-cluster` may be up)
# what an earlier run of this test left when it was killed outright (SIGKILL runs no trap): clusters named after
# a test process that no longer exists
for stale in $(ip netns list 2>/dev/null | grep -oE '^ptest[0-9]+' | sort -u); do
    kill -0 "${stale#ptest}" 2>/dev/null || PENTA_CLUSTER=$stale bash "$(dirname "$0")/../../scripts/fake_cluster.sh" down
done
STATE=/run/$PENTA_CLUSTER-cluster
SKIP_WHY=""
[ "$(id -u)" = 0 ] || SKIP_WHY="not root: network namespaces need CAP_SYS_ADMIN"
if [ -z "$SKIP_WHY" ]; then
    up_out=$(bash "$FC" up 2 --slots 2 2>&1) || SKIP_WHY="fake_cluster.sh up refused: $up_out"
fi
if [ -n "$SKIP_WHY" ]; then
    bash "$FC" down >/dev/null 2>&1
    echo "cluster test: skipped ($SKIP_WHY)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
trap 'kill $(jobs -p) 2>/dev/null; bash "$FC" down >/dev/null 2>&1; rm -rf "$TMP"' EXIT
trap 'exit 143' TERM INT HUP  # killed (the runner's time limit, Ctrl-C): the EXIT trap still takes the cluster down
source "$STATE/env"
# mpirun in node0; OpenMPI's TCP on the nodes' eth0; the same flags for the run on one node
on_cluster=(bash "$FC" exec node0 $MPIRUN $PENTA_CLUSTER_MPI_OPTS --mca mpi_yield_when_idle 1 -np 4)
on_one=($MPIRUN --mca mpi_yield_when_idle 1 -np 4)
train=("$BIN/09_5d" --dp 2 --tp 2 --micro-batch 2 --grad-accum 2 --seq 16 --log-every 1 --warmup 1)

# 1. the same training, bit for bit: every field that is not a time or a rate
# (the run on one node, and the host name of each rank below, at the same time: most of a run is start-up)
"${on_one[@]}" "${train[@]}" --steps 3 --log-jsonl "$TMP/one.jsonl" >"$TMP/one.out" 2>&1 &
one=$!
"${on_cluster[@]}" sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname)"' >"$TMP/hosts.out" 2>&1 &
hosts_job=$!
"${on_cluster[@]}" "${train[@]}" --steps 3 --log-jsonl "$TMP/two.jsonl" >"$TMP/two.out" 2>&1 &
two=$!
wait $two  # (in the background: a signal to this script interrupts a wait, not a foreground command)
rc_two=$?
wait $one
rc_one=$?
wait $hosts_job
fields() { grep -oE '"(step|loss|grad_norm|lr|task_accuracy|tokens)":[^,}]*' "$1" 2>/dev/null; }
why=""
if [ $rc_one != 0 ] || [ $rc_two != 0 ]; then why="exit $rc_one on one node, $rc_two on two"
elif [ "$(fields "$TMP/one.jsonl" | grep -c '"step"')" != 3 ]; then why="the one-node log has not 3 steps"
elif ! diff <(fields "$TMP/one.jsonl") <(fields "$TMP/two.jsonl") >"$TMP/diff"; then why="the logs differ: $(head -4 "$TMP/diff" | tr '\n' ' ')"
fi
expect_verdict "dp 2 x tp 2 over 2 nodes trains as on 1 node (step, loss, grad norm, lr, acc of 3 steps equal)" \
    "$why" "$(fields "$TMP/two.jsonl" | grep '"loss"' | tail -1)" "$(cat "$TMP/one.out" "$TMP/two.out")"

# 2. placement by host name
# (only the ranks' lines: OpenMPI's rsh launcher may add a warning, e.g. "plm:rsh: Warning: setpgid(...) failed")
hosts=$(grep -E '^[0-9]+ [^ ]+$' "$TMP/hosts.out" | sort -n | awk '{print $2}' | tr '\n' ' ')
table=$(awk '/^layout: rank/ {on = 1; getline; next} on && NF == 0 {exit} on {printf "%s ", $2}' "$TMP/two.out")
why=""
if [ "$hosts" != "node0 node0 node1 node1 " ]; then why="mpirun placed the ranks on '$hosts', not node0 node0 node1 node1"
elif [ "$table" != "0 0 1 1 " ]; then why="the layout table's node column is '$table', not 0 0 1 1"
else why=$(expect_missing "$(cat "$TMP/two.out")" "on 4 ranks, 2 nodes (by host name; node 0 is node0) && inside node  by axis")
fi
[ -z "$why" ] && ! grep -qE '^ +0 +0 .* tp .* dp x cp ' "$TMP/two.out" && why="rank 0's bytes are not tp inside, dp x cp across"
expect_verdict "placement by host name: ranks 0 1 on node0, 2 3 on node1; tp inside, dp x cp across" "$why" \
    "hosts $hosts" "$(cat "$TMP/two.out")"

# the pids of node1's ranks (not its daemon): the processes in node1's network namespace running 09_5d
node1_ranks() { for p in $(ip netns pids $PENTA_CLUSTER-node1); do [ "$(cat /proc/$p/comm 2>/dev/null)" = 09_5d ] && echo $p; done; }
# starts a long run in the background, waits for its first step line (at most 60 s); out: $TMP/$1.out, pid $job
start_long() {
    "${on_cluster[@]}" "${train[@]}" --steps 100000 "${@:2}" >"$TMP/$1.out" 2>&1 &
    job=$!
    for _ in $(seq 600); do grep -qs '^step' "$TMP/$1.out" && return; sleep 0.1; done
}
# waits for $job at most $1 s; sets rc to its exit status (124: still running, then killed) and took to the
# seconds since $t0
finish() {
    local t
    for t in $(seq $(($1 * 10))); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    if kill -0 $job 2>/dev/null; then kill $job 2>/dev/null; wait $job 2>/dev/null; rc=124; else wait $job; rc=$?; fi
    took=$(($(date +%s) - t0))
}

# 3. node1's cable cut at the switch
start_long cut --comm-timeout 5
t0=$(date +%s)
bash "$FC" link node1 down
finish 60
out=$(cat "$TMP/cut.out")
if [ "$rc" = 0 ]; then why="exited 0"
elif [ "$rc" = 124 ]; then why="still running 60 s after the link went down"
else why=$(expect_missing "$out" "watchdog: && did not arrive: ranks 2, 3")
fi
expect_verdict "node1's link down: the job ends naming ranks 2, 3 (--comm-timeout 5)" "$why" "exit $rc, ${took} s" "$out"
bash "$FC" link node1 up
for p in $(ip netns pids $PENTA_CLUSTER-node1); do kill -KILL $p 2>/dev/null; done  # what the cut left behind on node1

# 4. node1's ranks killed
start_long kill --comm-timeout 120
t0=$(date +%s)
pids=$(node1_ranks)
[ -n "$pids" ] && kill -KILL $pids
finish 60
out=$(cat "$TMP/kill.out")
if [ -z "$pids" ]; then why="no rank of node1 found to kill"
elif [ "$rc" = 0 ]; then why="exited 0"
elif [ "$rc" = 124 ]; then why="still running 60 s after node1's ranks were killed (--comm-timeout 120)"
else why=$(expect_missing "$out" "on node node1 exited on signal 9")
fi
expect_verdict "node1's ranks killed: the job ends at once, before --comm-timeout 120, naming node1" "$why" \
    "exit $rc, ${took} s" "$out"

# 5. nothing left
bash "$FC" down >"$TMP/down.out" 2>&1
left=$(ip netns list | grep -E "^$PENTA_CLUSTER-" ; [ -e "$STATE" ] && echo "$STATE"; ip -br link | grep -E '^(n[0-9]+|br0)[@ ]')
why=""
[ -n "$left" ] && why="left behind: $(tr '\n' ' ' <<<"$left")"
expect_verdict "fake_cluster.sh down leaves no namespace, link or file" "$why" "$(cat "$TMP/down.out")" "$left"
expect_summary
