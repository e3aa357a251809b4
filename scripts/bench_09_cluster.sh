#!/usr/bin/env bash
# bench_09_cluster.sh — the playbook's rule "tp inside a node, pp/dp across", measured: chapter 09 on a fake
# cluster of 2 nodes x 2 ranks (scripts/fake_cluster.sh: network namespaces, root) whose inter-node link is
# limited by tc's token bucket, while the path inside a node (shared memory) stays free. Same model (small), same
# global batch (32 sequences of 32 tokens a step), three layouts:
#   tp inside   --dp 2 --tp 2, ranks filled node by node: tp's pair inside a node, dp's across
#   tp across   --dp 2 --tp 2 --force-tp-across-nodes, mpirun --map-by node (round robin): tp's pair across, dp inside
#   pp across   --pp 2 --tp 2 (1F1B, 8 micro-batches of 4): tp inside, the two stages on different nodes
# Per layout and link rate: the median step time over steps 2..STEPS, and beside it the planner's prediction for
# the same layout and bandwidths (09_5d_plan --machine cpu: --inter-bw half the link's rate, since a node's two
# ranks share its cable and in each layout both send across at once, --intra-bw the preset's
# 5 GB/s, --peak-tflops the GFLOP/s per rank that "tp inside" measured on the free link, --efficiency 1). The
# planner places ranks node by node, so "tp across" is priced with --gpus-per-node 1 (every group across: its dp,
# inside a node in the run, priced across too). Prints a table; asserts nothing. About 8 min on 2 loaded cores
# (`make bench` runs it; skipped without root or namespace support).
#   bash scripts/bench_09_cluster.sh                        RATES="none 1gbit 10mbit" STEPS=6 (defaults)
set -euo pipefail
bin=${BIN:-build/bin}
steps=${STEPS:-6}
rates=${RATES:-none 1gbit 10mbit}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/bench_mpi.sh" bench_09_cluster  # $mpirun_cmd, $tmp
export PENTA_CLUSTER=pentabench
fc() { bash "$here/fake_cluster.sh" "$@"; }
trap 'fc down >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
trap 'exit 143' TERM INT HUP  # killed or interrupted: the EXIT trap still takes the cluster down
if ! up_out=$(fc up 2 --slots 2 2>&1); then  # without root or namespaces: say so, as an MPI=0 build does
    echo "bench_09_cluster: skipped ($up_out)"
    exit 0
fi
source /run/pentabench-cluster/env
common=(--micro-batch 4 --seq 32 --steps "$steps" --warmup 1 --log-every 1000)
echo "chapter 09 on 2 fake nodes x 2 ranks (model small, 32 sequences x 32 tokens a step, $steps steps per row;"
echo "inter-node link: tc tbf at the rate shown, both directions; inside a node: shared memory)"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for rate in $rates; do
    fc rate "$rate"
    for layout in tp_inside tp_across pp_across; do
        case $layout in
            tp_inside) map=(); flags=(--dp 2 --tp 2 --grad-accum 4) ;;
            tp_across) map=(--map-by node); flags=(--dp 2 --tp 2 --grad-accum 4 --force-tp-across-nodes) ;;
            pp_across) map=(); flags=(--pp 2 --tp 2 --grad-accum 8 --pp-schedule 1f1b) ;;
        esac
        fc exec node0 $mpirun_cmd $PENTA_CLUSTER_MPI_OPTS --mca mpi_yield_when_idle 1 "${map[@]}" -np 4 \
            "$bin/09_5d" "${flags[@]}" "${common[@]}" --log-jsonl "$tmp/$rate-$layout.jsonl" >"$tmp/$rate-$layout.txt" 2>&1 \
            || { echo "$layout at $rate failed:"; tail -20 "$tmp/$rate-$layout.txt"; exit 1; }
    done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$tmp" "$bin" $rates <<'EOF'
import json, re, statistics, subprocess, sys
tmp, bin, rates = sys.argv[1], sys.argv[2], sys.argv[3:]
def rows(rate, layout):
    return [json.loads(l) for l in open(f"{tmp}/{rate}-{layout}.jsonl")][1:]  # step 1 pays for first touch
def med(rate, layout, key):
    return statistics.median(r[key] for r in rows(rate, layout))
peak = med(rates[0], "tp_inside", "tflops_per_device")  # measured on the first rate (the free link by default)
gbps = {"none": None}
def inter_bw(rate):  # GB/s per rank: a node's cable is shared by its 2 ranks, and in every layout here both send
    m = re.fullmatch(r"(\d+)(bit|kbit|mbit|gbit)", rate)  # across at once (the planner's is per GPU: a NIC each)
    return int(m.group(1)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)] / 8 / 1e9 / 2
plan = {"tp_inside": ["--dp", "2", "--tp", "2", "--grad-accum", "4", "--gpus-per-node", "2"],
        "tp_across": ["--dp", "2", "--tp", "2", "--grad-accum", "4", "--gpus-per-node", "1", "--allow-cross-node-tp"],
        "pp_across": ["--pp", "2", "--tp", "2", "--dp", "1", "--grad-accum", "8", "--gpus-per-node", "2"]}
def predict(rate, layout):
    if rate == "none": return None
    out = subprocess.run([f"{bin}/09_5d_plan", "--model", "small", "--machine", "cpu", "--gpus", "4", "--seq", "32",
                          "--global-batch", "32", "--precision", "fp32", "--micro-batch", "4",
                          "--inter-bw", str(inter_bw(rate)), "--peak-tflops", str(peak), "--efficiency", "1"]
                         + plan[layout], capture_output=True, text=True, check=True).stdout
    m = re.search(r"step ([\d.]+) s = compute ([\d.]+) \+ bubble ([\d.]+) \+ exposed dp ([\d.]+) tp ([\d.]+) pp ([\d.]+)", out)
    return [float(x) for x in m.groups()]
print(f"\n(planner: --peak-tflops {peak:.4f}, the GFLOP/s per rank of 'tp inside' on the '{rates[0]}' link)")
print(f"{'link':>8} {'layout':>10} {'step ms':>8} {'vs tp inside':>13}   {'planner ms':>10} = compute + bubble + exposed dp, tp, pp")
for rate in rates:
    base = med(rate, "tp_inside", "seconds")
    for layout in ("tp_inside", "tp_across", "pp_across"):
        s = med(rate, layout, "seconds")
        p = predict(rate, layout)
        pred = "-" if p is None else f"{p[0]*1e3:10.0f} = {p[1]*1e3:.0f} + {p[2]*1e3:.0f} + {p[3]*1e3:.0f}, {p[4]*1e3:.0f}, {p[5]*1e3:.0f}"
        print(f"{rate:>8} {layout.replace('_', ' '):>10} {s*1e3:8.0f} {s/base:12.2f}x   {pred}")
EOF
