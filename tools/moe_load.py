#!/usr/bin/env python3
"""moe_load.py — the experts' load over a chapter 08 run, from its --log-jsonl file(s).

Playbook: "Expert parallelism" (load balancing). 08_expert_parallel writes, per step, the tokens each expert of
every MoE layer was chosen by over the global batch ("tokens_per_expert_layer<i>"). This prints, for each file
and each chosen step, every layer's load as multiples of the mean (1.00 everywhere is a perfect balance) with
MaxVio = max / mean - 1, and the mean MaxVio over the last 10% of the steps (one step's batch is noisy).

  mpirun -np 2 build/bin/08_expert_parallel --moe-balance none --log-jsonl /tmp/none.jsonl
  python3 tools/moe_load.py /tmp/none.jsonl /tmp/aux.jsonl --steps 1 100 1500
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="--log-jsonl files of 08_expert_parallel")
    ap.add_argument("--steps", nargs="+", type=int, default=[1], help="steps to show (1-based; -1: the last)")
    args = ap.parse_args()
    for path in args.files:
        rows = [json.loads(line) for line in open(path)]
        layers = sorted((k for k in rows[0] if k.startswith("tokens_per_expert_layer")),
                        key=lambda k: int(k[len("tokens_per_expert_layer"):]))
        print(f"{path}: {len(rows)} steps, {len(layers)} MoE layers")
        for step in args.steps:
            r = rows[step - 1] if step > 0 else rows[step]
            print(f"  step {r['step']:>5}  loss {r['loss']:.4f}")
            for k in layers:
                load = r[k]
                mean = sum(load) / len(load)
                print(f"    layer {k[len('tokens_per_expert_layer'):]}: " + " ".join(f"{v / mean:4.2f}" for v in load)
                      + f"   MaxVio {max(load) / mean - 1:.2f}")
        tail = rows[-max(1, len(rows) // 10):]
        print(f"  MaxVio over the last {len(tail)} steps, mean of the layers: "
              f"{sum(r['maxvio'] for r in tail) / len(tail):.3f}")


if __name__ == "__main__":
    main()
