#!/usr/bin/env python3
"""readme_outputs.py — the READMEs' output blocks, recorded by running their exact commands.

A README block is generated when it sits between a marker that holds its commands and `<!-- /output -->`:

    <!-- output 01-run trim=evals : build/bin/01_single_gpu -->
    <!-- output 02-run : mpirun -np 2 build/bin/02_data_parallel --dp 2 ;; build/bin/01_single_gpu --steps 5 -->

Before ":": the block's name (unique; its whole output is kept in docs/outputs/NAME.txt) and options:
kernel=Haswell|SkylakeX (the OpenBLAS kernel it runs under, Haswell by default), exit=N (the last command's
exit status when it fails on purpose: a refusal, an injected fault; 0 by default; exit=N,N,... one status per
command, for a block of several refusals), trim=evals,tables,... (the lines left out: evals = step lines
without an evaluation, except the first and the last; tables = the memory tables; layout = 09_5d's layout,
memory-per-rank and bytes-per-axis tables; headers = a later command's header lines; build = compiler lines of
a make that rebuilt), grep=REGEX (only lines matching it). After ":", the commands exactly as a reader types
them, separated by " ;; ". Between the markers go a caption (machine, BLAS kernel, date, commit, what was left
out) and the trimmed output, each command's lines after "$ command".
The paragraph right after `<!-- /output -->` is the block's reading: every percentage and every "step N" it
states must be in the block (to the digits it states).

    python3 scripts/readme_outputs.py --list                 # every block: README, name, commands
    python3 scripts/readme_outputs.py 01-run 01-generate     # run these blocks' commands, rewrite the blocks
    python3 scripts/readme_outputs.py --readme 02_data_parallel/README.md    # every block of one README
    python3 scripts/readme_outputs.py --all                  # every block (an hour or more on 2 cores)
    python3 scripts/readme_outputs.py --check                # no runs: blocks equal their records, figures hold
    python3 scripts/readme_outputs.py --retrim 01-run        # no runs: the block again from its record
    python3 scripts/readme_outputs.py --stale HEAD           # after a rerun: figures the prose kept from the old run

--check is what tests/tooling/readme_outputs_test.sh runs in `make test`. Exit status: 0 done / all hold,
1 a block or a figure differs from its record (each named with README:line), 2 a run failed or an argument is
wrong. A command runs from the repository's root as the Makefile launches it (mpirun gets its root and
oversubscribe flags) with OPENBLAS_CORETYPE set to the block's kernel, so the caption can say which printed it.
Playbook: none (the READMEs' honesty: what a reader runs is what the README shows).
"""
import argparse
import datetime
import os
import re
import shlex
import subprocess
import sys
import time

from learning_check import KERNELS, mpirun_launcher  # the kernels' names, the Makefile's mpirun

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRIMS = {  # name: what the caption says was left out
    "evals": "step lines without an evaluation (the first and last kept)",
    "tables": "the memory tables",
    "headers": "the header lines of every command after the first",
    "build": "the compiler lines of a make that rebuilt first",
    "layout": "the layout, memory-per-rank and bytes-per-axis tables",
}
STEP = re.compile(r"^step +(\d+)/(\d+) ")
EXIT = re.compile(r"^\(exit status \d+\)$")
TABLE = re.compile(r"^(memory (by tag|on )|  (params|grads|master|optim|activations|comm|workspace|total) +\S+ +\S+$|"
                   r"  \(\+ [0-9.]+\S+ of freed blocks)")
BUILD = re.compile(r"^(g\+\+|gcc|nvcc|ar|ranlib|mkdir|make\[\d+\]:) ")
LAYOUT = re.compile(r"^(layout: rank -> |memory per rank |bytes each rank sent )")  # 09's tables: to a blank line
HEADER = re.compile(r"^(\S+: model |device |data |batch: |ln\(vocab\)|loaded |model state formula)")
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
MARK = re.compile(r"^<!-- output (.+?) -->$")
END = "<!-- /output -->"


class Block:
    """one marked block of a README: its name, options, commands, and where it sits"""

    def __init__(self, readme, start, body, end, text):
        self.readme, self.start, self.body, self.end = readme, start, body, end  # marker, its last line, /output
        head, sep, cmds = text.partition(" : ")
        words = shlex.split(head)
        if not sep or not words or not cmds.strip():
            raise ValueError(f"{readme}:{start + 1}: a marker is `<!-- output NAME [options] : COMMAND -->`")
        self.name, opts = words[0], dict(w.split("=", 1) for w in words[1:] if "=" in w)
        bad = [w for w in words[1:] if "=" not in w] + [k for k in opts if k not in ("kernel", "trim", "grep", "exit")]
        self.kernel = opts.get("kernel", "Haswell")
        self.trims = [t for t in opts.get("trim", "").split(",") if t]
        self.grep = opts.get("grep")
        self.cmds = [c.strip() for c in cmds.split(" ;; ")]
        # each command's exit status: a demo of a refusal or a fault is not 0; exit=N is the last command's
        self.exits = opts.get("exit", "0").split(",")
        if len(self.exits) == 1:
            self.exits = ["0"] * (len(self.cmds) - 1) + self.exits
        if bad or self.kernel not in KERNELS or any(t not in TRIMS for t in self.trims) or \
                not all(e.isdigit() for e in self.exits) or len(self.exits) != len(self.cmds):
            raise ValueError(f"{readme}:{start + 1}: {self.name}: options are kernel={'|'.join(KERNELS)}, "
                             f"trim={','.join(TRIMS)}, grep=REGEX, exit=N or one N per command "
                             f"(read {' '.join(words[1:])})")


def blocks_of(root, rel):
    """the marked blocks of one README, and its lines"""
    with open(os.path.join(root, rel)) as f:
        lines = f.read().split("\n")
    found, open_at, i = [], None, 0
    while i < len(lines):
        if lines[i].startswith("<!-- output "):  # a marker may go on over several lines, up to its "-->"
            j = i
            while not lines[j].rstrip().endswith("-->") and j + 1 < len(lines):
                j += 1
            m = MARK.match(" ".join(l.strip() for l in lines[i:j + 1]))
            if not m:
                raise ValueError(f"{rel}:{i + 1}: a marker is `<!-- output NAME [options] : COMMAND -->`")
            open_at, i = (i, j, m.group(1)), j
        elif lines[i].strip() == END and open_at:
            found.append(Block(rel, open_at[0], open_at[1], i, open_at[2]))
            open_at = None
        i += 1
    return found, lines


def readmes(root):
    return sorted(os.path.join(d, "README.md") for d in os.listdir(root)
                  if os.path.isfile(os.path.join(root, d, "README.md")))


def launcher(cmd):
    """the command as the Makefile runs it: mpirun gets root and oversubscribe flags"""
    if cmd.startswith("mpirun "):
        return " ".join(mpirun_launcher()) + cmd[len("mpirun"):]
    return cmd


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores"


def trim(body, b):
    """the record's lines that the block shows"""
    out, nth, in_layout = [], -1, False
    for l in body:
        l = l.rstrip()
        if "layout" in b.trims and (in_layout or LAYOUT.match(l)):
            in_layout = bool(l)  # a table goes on to its blank line, which goes with it
            continue
        if l.startswith("$ "):
            nth += 1
            out.append(l)
            continue
        if EXIT.match(l):  # a demo's status is the script's line, not the program's: no grep hides it
            out.append(l)
            continue
        m = STEP.match(l)
        if "evals" in b.trims and m and "| acc " not in l and m.group(1) not in ("1", m.group(2)):
            continue
        if "build" in b.trims and BUILD.match(l):
            continue
        if "tables" in b.trims and TABLE.match(l):
            continue
        if "headers" in b.trims and nth > 0 and HEADER.match(l):
            continue
        if b.grep and not re.search(b.grep, l):
            continue
        out.append(l)
    return out


def record_path(root, name):
    return os.path.join(root, "docs", "outputs", name + ".txt")


def read_record(root, name):
    """(header fields, output lines) of docs/outputs/NAME.txt"""
    with open(record_path(root, name)) as f:
        head, _, body = f.read().partition("\n\n")
    fields = dict(l[2:].split(": ", 1) for l in head.splitlines() if l.startswith("# ") and ": " in l)
    return fields, body.rstrip("\n").split("\n")


def block_text(root, b, record):
    """the lines between a block's markers: caption, fence, trimmed output, fence (from its record alone)"""
    fields, body = record
    rel = os.path.relpath(record_path(root, b.name), os.path.join(root, os.path.dirname(b.readme)))
    left = [TRIMS[t] for t in b.trims] + ([f"lines not matching `{b.grep}`"] if b.grep else [])
    cap = (f"Recorded by `scripts/readme_outputs.py {b.name}` on {fields['date']} (commit {fields['commit']}): "
           f"{fields['machine']}, OpenBLAS kernel {fields['kernel']}, {fields['wall']}"
           + (f" at a load average of {fields['load']}" if "load" in fields else "") + ". "
           + (f"Left out: {'; '.join(left)}. " if left else "") + f"Whole output: [{b.name}.txt]({rel}).")
    return [cap, "", "```", *trim(body, b), "```"]


def run(root, b):
    env = {**os.environ, **ENV, "OPENBLAS_CORETYPE": b.kernel}
    out, t0 = [], time.time()
    load = f"{os.getloadavg()[0]:.1f}"  # other work on the machine slows the steps the block shows
    for k, cmd in enumerate(b.cmds):
        print(f"readme_outputs: {b.name}: {cmd}", flush=True)
        p = subprocess.run(["bash", "-c", launcher(cmd)], cwd=root, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        out += [f"$ {cmd}", p.stdout.rstrip("\n")]
        want = int(b.exits[k])
        if p.returncode != want:
            sys.stderr.write(p.stdout[-3000:])
            print(f"readme_outputs: {b.name}: `{cmd}` exited {p.returncode}, not {want}"
                  f"{' (a demo that fails on purpose says exit=N in its marker)' if want == 0 else ''}; "
                  f"its block is left as it was", file=sys.stderr)
            return False
        if want:
            out.append(f"(exit status {want})")
    wall = time.time() - t0
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                            text=True).stdout.strip() or "unknown"
    # a change to the programs' sources makes the commit's name untrue; docs, scripts and tests do not
    changed = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                             stdout=subprocess.PIPE, text=True).stdout.split("\n")
    dirty = [l[3:] for l in changed if l[3:] and not l[3:].endswith(".md") and
             not l[3:].startswith(("docs/", "scripts/", "tests/", "tools/", ".ci/"))]
    head = {"commands": " ;; ".join(b.cmds), "date": datetime.date.today().isoformat(), "load": load,
            "commit": commit + (" with uncommitted changes" if dirty else ""), "machine": machine(),
            "kernel": f"{b.kernel} ({KERNELS[b.kernel]})",
            "wall": f"{wall / 60:.1f} min wall" if wall >= 60 else f"{wall:.0f} s wall"}
    os.makedirs(os.path.dirname(record_path(root, b.name)), exist_ok=True)
    with open(record_path(root, b.name), "w") as f:
        f.write("".join(f"# {k}: {v}\n" for k, v in head.items()) + "\n" + "\n".join(out) + "\n")
    rewrite(root, b)
    return True


def rewrite(root, b):
    """the block between b's markers, from its record (the README is read again: it may have changed)"""
    blocks, lines = blocks_of(root, b.readme)
    nb = next(x for x in blocks if x.name == b.name)
    lines[nb.body + 1:nb.end] = block_text(root, nb, read_record(root, nb.name))
    with open(os.path.join(root, b.readme), "w") as f:
        f.write("\n".join(lines))
    print(f"readme_outputs: {b.name}: {b.readme} rewritten from docs/outputs/{b.name}.txt", flush=True)


def reading(lines, end):
    """the paragraph right after a block's end marker: (its first line's index, its text)"""
    i = end + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    j = i
    while j < len(lines) and lines[j].strip() and not lines[j].startswith("#") and not MARK.match(lines[j]):
        j += 1
    return i, " ".join(lines[i:j])


def figure_problems(block, prose):
    """the percentages and step numbers of prose that the block does not hold"""
    text = "\n".join(block)
    problems = []
    for m in re.finditer(r"(\d+(?:\.\d+)?) ?%", prose):
        stated = m.group(1)
        digits = len(stated.split(".")[1]) if "." in stated else 0
        shown = {f"{float(x):.{digits}f}" for x in re.findall(r"(\d+(?:\.\d+)?) ?%", text)}
        if f"{float(stated):.{digits}f}" not in shown:
            problems.append(f"{stated}% is not a percentage of the block")
    steps = {int(x) for x in re.findall(r"^step +(\d+)/", text, re.M)}  # its step lines,
    steps |= {int(x) for x in re.findall(r"\bafter step (\d+)\b", text)}  # and steps a message names
    for m in re.finditer(r"(?<!-)\bsteps? (\d+)\b", prose):  # not a flag: `--steps 0` states no step
        if int(m.group(1)) not in steps:
            problems.append(f"step {m.group(1)} is not a step line of the block")
    return problems


def all_blocks(root):
    found = []
    for rel in readmes(root):
        found += blocks_of(root, rel)[0]
    return found


def check(root):
    problems, seen, n = [], {}, 0
    for rel in readmes(root):
        try:
            blocks, lines = blocks_of(root, rel)
        except ValueError as e:
            problems.append(str(e))
            continue
        for b in blocks:
            n += 1
            where = f"{rel}:{b.start + 1}"
            if b.name in seen:
                problems.append(f"{where}: the name {b.name} is taken by {seen[b.name]} (a record per name)")
            seen[b.name] = where
            if not os.path.isfile(record_path(root, b.name)):
                problems.append(f"{where}: no record docs/outputs/{b.name}.txt "
                                f"(run scripts/readme_outputs.py {b.name})")
                continue
            record = read_record(root, b.name)
            if record[0].get("commands") != " ;; ".join(b.cmds):
                problems.append(f"{where}: {b.name}'s commands are not the ones its record ran "
                                f"(scripts/readme_outputs.py {b.name} reruns them)")
                continue
            want = block_text(root, b, record)
            have = lines[b.body + 1:b.end]
            if have != want:
                k = next(k for k in range(max(len(want), len(have)) + 1)
                         if k >= len(want) or k >= len(have) or have[k] != want[k])
                problems.append(f"{rel}:{b.body + 2 + k}: the block differs from docs/outputs/{b.name}.txt "
                                f"(scripts/readme_outputs.py {b.name} reruns it)")
                continue
            at, prose = reading(lines, b.end)
            problems += [f"{rel}:{at + 1}: {p} ({b.name}'s record)" for p in figure_problems(want, prose)]
    for p in problems:
        print(f"readme_outputs: {p}")
    print(f"readme_outputs: {n} blocks checked, {len(problems)} problems")
    return 1 if problems else 0


NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")  # 1.2345, 36,203,520, 97.9 (of 97.9%)


def printed(num, text):
    """num in text as a number of its own, not part of a longer one"""
    return re.search(r"(?<![\d.])" + re.escape(num) + r"(?![\d])", text) is not None


def stale(root, rev):
    """after a rerun: each number in the prose after a block (to the next block, heading or fence) that the block's
    record at git revision REV printed and its record now does not: a figure the prose may still state from
    the old run. Numbers of fewer than 3 digits count only as percentages. A reading aid for rewriting the
    prose, not a check: a number can be in a record by chance."""
    if subprocess.run(["git", "-C", root, "rev-parse", "--verify", "--quiet", rev + "^{commit}"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        print(f"readme_outputs: --stale {rev}: not a commit of a git checkout at {root}", file=sys.stderr)
        return 2
    found = 0
    for rel in readmes(root):
        blocks, lines = blocks_of(root, rel)  # each README read once
        for b in blocks:
            old = subprocess.run(["git", "-C", root, "show", f"{rev}:./docs/outputs/{b.name}.txt"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if old.returncode != 0 or not os.path.isfile(record_path(root, b.name)):
                continue  # no record then, or none now: nothing to compare
            with open(record_path(root, b.name)) as f:
                new = f.read()
            if new == old.stdout:
                continue
            k = b.end + 1  # the prose: to the next block, heading or fenced text
            while k < len(lines) and not (MARK.match(lines[k]) or lines[k].startswith(("#", "```"))):
                for m in NUMBER.finditer(lines[k]):
                    n = m.group(0)
                    specific = sum(c.isdigit() for c in n) >= 3 or lines[k].startswith("%", m.end())
                    if specific and printed(n, old.stdout) and not printed(n, new):
                        print(f"readme_outputs: {rel}:{k + 1}: {n} is in {b.name}'s record at {rev}, "
                              "not in the new one")
                        found += 1
                k += 1
    print(f"readme_outputs: {found} figures of the prose left from the records at {rev}")
    return 1 if found else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="the blocks to rerun (--list names them)")
    ap.add_argument("--all", action="store_true", help="rerun every block")
    ap.add_argument("--readme", help="rerun every block of this README")
    ap.add_argument("--check", action="store_true", help="run nothing; compare the blocks with their records")
    ap.add_argument("--retrim", action="store_true", help="run nothing; rewrite the named blocks from their records "
                    "(after changing a marker's trim= or grep=)")
    ap.add_argument("--stale", metavar="REV", help="run nothing; after a rerun, list the numbers in the prose "
                    "after each rerun block that its record at git revision REV printed and the new one does not")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--root", default=ROOT, help="the tree whose READMEs and records are read (tests use a copy)")
    a = ap.parse_args()
    if a.check:
        return check(a.root)
    if a.stale:
        return stale(a.root, a.stale)
    try:
        every = all_blocks(a.root)
    except ValueError as e:
        print(f"readme_outputs: {e}", file=sys.stderr)
        return 2
    if a.list:
        for b in every:
            print(f"{b.readme}:{b.start + 1}  {b.name}  OPENBLAS_CORETYPE={b.kernel}  " + " ;; ".join(b.cmds))
        return 0
    by_name = {b.name: b for b in every}
    chosen = every if a.all else [b for b in every if b.readme == a.readme] if a.readme else \
        [by_name[n] for n in a.names if n in by_name]
    unknown = [n for n in a.names if n not in by_name]
    if unknown or not chosen:
        print(f"readme_outputs: {'no block named ' + ', '.join(unknown) if unknown else 'name blocks, --readme or --all'}"
              f" (--list shows them)", file=sys.stderr)
        return 2
    if a.retrim:
        missing = [b.name for b in chosen if not os.path.isfile(record_path(a.root, b.name))]
        if missing:
            print(f"readme_outputs: --retrim: no record of {', '.join(missing)} yet", file=sys.stderr)
            return 2
        for b in chosen:
            rewrite(a.root, b)
        return 0
    return 0 if all([run(a.root, b) for b in chosen]) else 2


if __name__ == "__main__":
    sys.exit(main())
