#!/usr/bin/env python3
"""tools/figures/verify_figures.py — checks the committed figures in docs/figures/ without drawing anything:

  1. every figure that a tools/figures/chNN_*.py module declares has its PNG (an image Pillow opens, more than
     MIN_KB KiB, at least 400 x 300 pixels) and its JSON (parses, names the figure, no empty list anywhere, at
     least one list of two or more numbers);
  2. every formula series in a JSON ({"queries": [...], "values": [...]}, figlib's Context.series) has a sample
     of its points — the first, the last and a few more — recomputed by build/bin/formula_dump here, called
     directly (not through figlib), and equal to the committed values;
  3. a chapter README (NN_*/README.md) shows every figure, and every docs/figures/*.png a README shows exists.

Prints PASS/FAIL lines and "N passed, N failed, 0 skipped"; exit 1 on any failure.
tests/tooling/figures_test.sh runs it (and edits a committed number in a copy to see it fail).
    python3 tools/figures/verify_figures.py [--out docs/figures] [--bin build/bin] [--only NAME,NAME]
"""
import argparse
import glob
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_figures  # noqa: E402  (the list of figures the modules declare)

MIN_KB = 10
SAMPLE = 6  # points of each series: the first, the last and up to 4 more


def numbers_list(x):
    return isinstance(x, list) and len(x) >= 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x)


def walk(x, path="$"):
    """(path, value) of every value in a JSON tree"""
    yield path, x
    if isinstance(x, dict):
        for k, v in x.items():
            yield from walk(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from walk(v, f"{path}[{i}]")


def sample(n, seed):
    """indices of up to SAMPLE points of a series of n: the first, the last, the rest drawn with a fixed seed"""
    idx = {0, n - 1}
    rest = [i for i in range(n) if i not in idx]
    random.Random(seed).shuffle(rest)
    return sorted(idx | set(rest[: SAMPLE - 2]))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(root, "docs", "figures"))
    ap.add_argument("--bin", default=os.path.join(root, "build", "bin"))
    ap.add_argument("--only", help="comma-separated figure names (default: every declared figure)")
    a = ap.parse_args()
    from PIL import Image

    passed = failed = 0

    def verdict(ok, what):
        nonlocal passed, failed
        print(("PASS: " if ok else "FAIL: ") + what)
        passed, failed = passed + bool(ok), failed + (not ok)

    figures = make_figures.load_figures()
    if a.only:
        keep = set(a.only.split(","))
        figures = [f for f in figures if f.name in keep]
    dump = os.path.join(a.bin, "formula_dump")
    for f in figures:
        png, js = os.path.join(a.out, f.name + ".png"), os.path.join(a.out, f.name + ".json")
        # 1. the PNG
        try:
            kb = os.path.getsize(png) / 1024
            with Image.open(png) as im:
                im.load()
                w, h = im.size
            verdict(kb > MIN_KB and w >= 400 and h >= 300, f"{f.name}.png opens: {w} x {h} pixels, {kb:.0f} KiB "
                    f"(want > {MIN_KB} KiB, >= 400 x 300)")
        except Exception as e:  # a missing or broken file is this check's failure, whatever the exception
            verdict(False, f"{f.name}.png: {e}")
        # 1. the JSON
        try:
            with open(js) as fh:
                data = json.load(fh)
        except (OSError, ValueError) as e:
            verdict(False, f"{f.name}.json: {e}")
            continue
        empty = [p for p, v in walk(data) if isinstance(v, (list, dict)) and len(v) == 0]
        series = sum(1 for _, v in walk(data) if numbers_list(v))
        verdict(data.get("figure") == f.name and not empty and series > 0,
                f"{f.name}.json: names the figure ({data.get('figure')!r}), {series} list(s) of numbers, "
                f"empty: {', '.join(empty[:5]) or 'none'}")
        # 2. its formula series, a sample of each recomputed
        found = [(p, v) for p, v in walk(data) if isinstance(v, dict) and set(v) >= {"queries", "values"}]
        for k, (path, s) in enumerate(found):
            qs, vs = s["queries"], s["values"]
            if len(qs) != len(vs) or not qs:
                verdict(False, f"{f.name}.json {path}: {len(qs)} queries, {len(vs)} values")
                continue
            idx = sample(len(qs), f"{f.name}{path}")
            p = subprocess.run([dump], input=json.dumps([qs[i] for i in idx]), capture_output=True, text=True)
            if p.returncode != 0:
                verdict(False, f"{f.name}.json {path}: formula_dump failed: {p.stderr.strip()}")
                continue
            now = json.loads(p.stdout)
            bad = [i for i, v in zip(idx, now) if v != vs[i]]
            verdict(not bad, f"{f.name}.json {path}: points {idx} of {len(qs)} recomputed by formula_dump"
                    + (f"; DIFFERENT at {bad[0]}: committed {vs[bad[0]]!r}, formula_dump gives "
                       f"{now[idx.index(bad[0])]!r} for {qs[bad[0]]}" if bad else ": equal"))
    # 3. the chapter READMEs show every figure, and every figure they show exists
    readmes = {}
    for path in sorted(glob.glob(os.path.join(root, "[0-9][0-9]_*", "README.md"))):
        with open(path) as fh:
            readmes[os.path.relpath(path, root)] = fh.read()
    for f in figures:
        where = [r for r, text in readmes.items() if f"docs/figures/{f.name}.png" in text]
        verdict(bool(where), f"{f.name}.png is shown by {', '.join(where) or 'no chapter README'}")
    if not a.only:
        for r, text in readmes.items():
            for name in re.findall(r"docs/figures/([\w.-]+\.png)", text):
                verdict(os.path.exists(os.path.join(a.out, name)), f"{r} shows docs/figures/{name}: the file exists")
    print(f"{passed} passed, {failed} failed, 0 skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
