#!/usr/bin/env python3
"""learning_check.py — does each chapter's default run learn on this machine, whatever the BLAS kernel and seed?

The addition task has a plateau: a model that knows the digits' statistics but not the sum sits near a loss of
1.15 and 0 % accuracy, and whether it leaves depends on rounding (OpenBLAS's AVX2 and AVX-512 kernels round
differently), so a reader's machine may never leave it (issue 32). This runs each chapter's default command
(its README's first one, and `make run`'s) for its promised steps under both kernels and several seeds, and
prints, per run, the step at which it left the plateau (the first measured accuracy >= 10 %) and its final
accuracy (the mean of its last three measurements), beside what the README promises.

    python3 scripts/learning_check.py                       # every chapter, Haswell + SkylakeX, seeds 1 2 3
    python3 scripts/learning_check.py --chapters 01,02 --seeds 1 --kernels Haswell --steps 300   # a quick look
    python3 scripts/learning_check.py --chapters 01 --extra '--lr 1e-3 --weight-decay 0'   # a candidate
    python3 scripts/learning_check.py --list                # the runs, without running them
    python3 scripts/learning_check.py --chapters 01 --seeds 1,2,3,4,5,6 --until 0.9   # a screen: minutes a run
    python3 scripts/learning_check.py --chapters 01 --jobs 2   # two one-rank runs at once (2 cores: half the time)

--until ACC screens a candidate cheaply: each run keeps its whole schedule (the cosine of its promised steps) but
stops at its first measurement >= ACC, and the table gives that step. Where the runs that fail the whole check
come from is the slow tail of this step (issue 32), so a candidate whose screen ends every run early has earned
the hours of the whole check. A program that measures no accuracy (07) runs to its end and is judged as usual.

Exit status: 0 when every run left the plateau and reached its promised accuracy, 1 when one did not, 2 when a
run could not be made (a program missing or failing). Each run's JSONL and output stay in --out.
Playbook: "First steps: training on one GPU" (what a run that learns looks like). Not part of `make test`: the
whole check is 54 runs of up to 3,000 steps (its verdicts are tested by tests/tooling/learning_check_test.sh).
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# name, ranks, program, its arguments, the steps it runs, the final accuracy its README promises
RUNS = [
    ("01", 1, "01_single_gpu", [], 3000, 0.90),
    ("02", 2, "02_data_parallel", ["--dp", "2"], 3000, 0.90),
    ("03", 4, "03_zero", ["--dp", "4", "--zero", "3"], 3000, 0.90),
    ("04", 2, "04_tensor_parallel", ["--tp", "2"], 3000, 0.90),
    ("05", 2, "05_sequence_parallel", ["--tp", "2", "--sp"], 3000, 0.90),
    ("06", 2, "06_context_parallel", ["--cp", "2"], 3000, 0.90),
    ("07", 2, "07_pipeline_parallel", ["--pp", "2"], 3000, 0.90),
    ("08", 2, "08_expert_parallel", [], 3000, 0.90),
    ("run", 8, "09_5d", ["--dp", "2", "--tp", "2", "--pp", "2", "--pp-schedule", "1f1b", "--micro-batch", "4",
                         "--grad-accum", "4", "--lr", "2e-3", "--min-lr", "1e-4", "--warmup", "20",
                         "--weight-decay", "0", "--log-every", "25"], 750, 0.90),
]
KERNELS = {"Haswell": "AVX2", "SkylakeX": "AVX-512"}
LEFT = 0.10  # an accuracy a plateau does not reach (its measurements stay at 0-4 %)
LEFT_LOSS = 0.9  # without an accuracy: a loss the plateau (1.15-1.2) does not reach
LOSS_PROMISE = 0.1  # ... and the loss a run that answers about 90 % exactly is below (chapter 01's records)


def read_log(jsonl):
    """a run's JSONL as a list of dicts ([]: no file yet); a last line still being written is left for later"""
    try:
        with open(jsonl) as f:
            return [json.loads(line) for line in f if line.strip().endswith("}")]
    except (OSError, ValueError):
        return []


def reached(log, until):
    """the step of the first measured accuracy >= until (None: not yet)"""
    return next((j["step"] for j in log if j.get("task_accuracy", -1) >= until), None)


def judge(log, promised, until=None):
    """(the step it left the plateau or None, what its figure is, the figure as text, whether it kept the
    promise). With until (a screen): the step of its first accuracy >= until, the promise being to get there."""
    # evaluations, or the head stage's per-step meter
    acc = [(j["step"], j["task_accuracy"]) for j in log if "task_accuracy" in j]
    if acc:
        left = next((st for st, x in acc if x >= LEFT), None)
        if until is not None:
            at = reached(log, until)
            return left, "reached", f"{100 * until:.0f} % at {at}" if at else f"not {100 * until:.0f} %", at is not None
        last = [x for _, x in acc[-3:]]
        final = sum(last) / len(last)
        return left, "final", f"{100 * final:.1f} %", left is not None and final >= promised
    # no accuracy in the log (07 spreads the model over stages and has no evaluation): the loss says it
    losses = [(j["step"], j["loss"]) for j in log if "loss" in j]
    if not losses:
        return None, "final", None, False
    left = next((st for st, x in losses if x < LEFT_LOSS), None)
    tail = [x for _, x in losses[-max(1, len(losses) // 10):]]
    final = sum(tail) / len(tail)
    return left, "final", f"loss {final:.4f}", left is not None and final <= LOSS_PROMISE


def run_until(cmd, log, env, jsonl, until):
    """run cmd; with until, stop it at its first accuracy >= until (mpirun passes the SIGTERM on to its
    ranks). Its exit status, 0 when it was stopped there."""
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    while until is not None and p.poll() is None:
        time.sleep(2)
        if reached(read_log(jsonl), until) is not None:
            p.terminate()
            p.wait()
            return 0
    return p.wait()


def cpu_has(flag):
    """whether /proc/cpuinfo lists this instruction-set flag (Linux; elsewhere: assume it does)"""
    try:
        with open("/proc/cpuinfo") as f:
            return any(l.startswith("flags") and flag in l.split() for l in f)
    except OSError:
        return True


def mpirun_launcher():
    """mpirun as the Makefile's MPIRUN launches it, OPENBLAS_CORETYPE passed on to every rank (also
    scripts/readme_outputs.py's)"""
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []  # OpenMPI refuses root without it
    return ["mpirun", *root, "--oversubscribe", "--bind-to", "none", "-x", "OPENBLAS_NUM_THREADS=1", "-x",
            "OMP_NUM_THREADS=1", "-x", "OPENBLAS_CORETYPE"]


def mpirun(np):
    """the launcher of an np-rank run"""
    return mpirun_launcher() + ["-np", str(np)]


def say(line):
    """one whole line to stdout (with --jobs, runs end at once: print's text and newline could interleave)"""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def command(a, run, kernel, seed):
    """(the stem its JSONL and output are named by, the command line, the steps it runs) of one run"""
    name, np, prog, args, promised_steps, _ = run
    steps = a.steps or promised_steps
    tag = "".join(c if c.isalnum() or c in ".-" else "_" for c in a.extra.replace("--", ""))
    # named by what changes the run: the candidate's flags, and steps other than the promised ones (two
    # runs writing one log would garble both)
    stem = os.path.join(a.out, f"{name}_{kernel}_seed{seed}" + (f"_{tag}" if tag else "") +
                        (f"_steps{steps}" if steps != promised_steps else ""))
    cmd = (mpirun(np) if np > 1 else []) + [os.path.join(a.bin, prog)] + args + a.extra.split() + [
        "--seed", str(seed), "--steps", str(steps), "--log-jsonl", stem + ".jsonl"]
    return stem, cmd, steps


def check_one(a, total, i, job):
    """make (or, with --keep, reuse) one run and judge it: its row of the table"""
    run, kernel, seed = job
    name, promised = run[0], run[5]
    stem, cmd, steps = command(a, run, kernel, seed)
    t0 = time.time()
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel, "OPENBLAS_NUM_THREADS": "1"}
    made = read_log(stem + ".jsonl")
    if a.keep and made and (made[-1].get("step") == steps or
                            (a.until is not None and reached(made, a.until) is not None)):
        rc = 0  # made before, to its last step (or, for a screen, to the accuracy it stops at)
    else:
        if os.path.exists(stem + ".jsonl"):
            os.remove(stem + ".jsonl")  # read before the run opens its own, a stale log would stop it
        with open(stem + ".txt", "w") as log:
            rc = run_until(cmd, log, env, stem + ".jsonl", a.until)
    secs = time.time() - t0
    if rc != 0:
        say(f"[{i + 1}/{total}] {name} {kernel} seed {seed}: exit {rc} after {secs:.0f} s ({stem}.txt)")
        return name, kernel, seed, None, None, promised, "failed"
    left, said, final, ok = judge(read_log(stem + ".jsonl"), promised, a.until)
    say(f"[{i + 1}/{total}] {name} {kernel} seed {seed}: left the plateau at "
        f"{left if left is not None else 'never'}, {said} {final} ({secs:.0f} s)")
    return name, kernel, seed, left, final, promised, "ok" if ok else "NO"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chapters", default=",".join(r[0] for r in RUNS), help="comma-separated: 01 ... 08, run")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="OPENBLAS_CORETYPE values: Haswell (AVX2), "
                    "SkylakeX (AVX-512)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=0, help="run this many steps instead of each one's promised steps")
    ap.add_argument("--extra", default="", help="arguments added to every run (a candidate schedule, say "
                    "'--lr 1e-3 --weight-decay 0'); outputs are named after them")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--out", default="/tmp/learning_check")
    ap.add_argument("--keep", action="store_true", help="reuse a run whose JSONL in --out already reaches its last "
                    "step (the whole check takes hours: it can be made in parts)")
    ap.add_argument("--until", type=float, default=None, metavar="ACC", help="a screen: stop each run at its "
                    "first measured accuracy >= ACC (0.9, say) and give that step instead of the final accuracy")
    ap.add_argument("--jobs", type=int, default=1, help="runs made at once (default 1). A one-rank run (01) keeps one "
                    "core busy, so --jobs 2 halves chapter 01's check on 2 cores; the multi-rank runs fill the "
                    "machine alone")
    ap.add_argument("--list", action="store_true", help="print the runs and stop")
    a = ap.parse_args()
    chapters = a.chapters.split(",")
    unknown = [c for c in chapters if c not in [r[0] for r in RUNS]]
    if unknown:
        sys.exit(f"learning_check: --chapters: no run named {', '.join(unknown)} (the runs: "
                 f"{', '.join(r[0] for r in RUNS)})")
    kernels = a.kernels.split(",")
    for k in kernels:
        if k not in KERNELS:
            sys.exit(f"learning_check: --kernels: {k} is not one of {', '.join(KERNELS)}")
    if "SkylakeX" in kernels and not a.list and not cpu_has("avx512f"):
        # OpenBLAS cannot run its AVX-512 kernel here: say so rather than count a run that was not made
        print("learning_check: this CPU has no AVX-512: the SkylakeX runs are skipped, not passed", flush=True)
        kernels.remove("SkylakeX")
    if a.until is not None and not 0 < a.until <= 1:
        sys.exit(f"learning_check: --until {a.until}: an accuracy in (0, 1], say 0.9")
    if a.jobs < 1:
        sys.exit(f"learning_check: --jobs {a.jobs}: at least 1 run at a time")
    seeds = [int(s) for s in a.seeds.split(",")]
    plan = [(r, k, s) for r in RUNS if r[0] in chapters for k in kernels for s in seeds]
    os.makedirs(a.out, exist_ok=True)
    if a.list:
        for item in plan:
            print(f"OPENBLAS_CORETYPE={item[1]} {' '.join(command(a, *item)[1])}")
        return 0
    for exe in sorted({os.path.join(a.bin, r[2]) for r, _, _ in plan}):
        if not os.access(exe, os.X_OK):
            sys.exit(f"learning_check: {exe} is missing: build it first (make all)")
    # --jobs N: N runs at once (a one-rank run keeps one core busy; the others already fill the machine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        done = pool.map(lambda job: check_one(a, len(plan), *job), enumerate(plan))
        rows = list(done)
    status = 2 if any(r[-1] == "failed" for r in rows) else 1 if any(r[-1] == "NO" for r in rows) else 0
    last = f"{'final':>12} {'promised':>9}" if a.until is None else f"{'reached':>12}"
    print(f"\n{'run':<5} {'kernel':<19} {'seed':>4} {'left plateau':>13} {last}  verdict")
    for name, kernel, seed, left, final, promised, verdict in rows:
        print(f"{name:<5} {kernel + ' (' + KERNELS[kernel] + ')':<19} {seed:>4} "
              f"{'never' if left is None else 'step ' + str(left):>13} "
              f"{final or '-':>12}" + (f" {100 * promised:>8.0f}%" if a.until is None else "") + f"  {verdict}")
    screen = f"reached: the step of the first >= {100 * a.until:.0f} %, where the run was stopped; " if a.until else ""
    print(f"(left the plateau: the first measured accuracy >= {100 * LEFT:.0f} %; {screen}final: the mean of the "
          f"last three measurements. A program that measures no accuracy (07's pipeline) is judged by its loss: left "
          f"below {LEFT_LOSS}, final the mean of its last tenth of steps, at most {LOSS_PROMISE}; outputs in {a.out})")
    return status


if __name__ == "__main__":
    sys.exit(main())
