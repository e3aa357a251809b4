#!/usr/bin/env bash
# figures_test.sh — the committed figures (docs/figures/, `make figures`) are what the code gives, and open.
#
#   1. tools/figures/make_figures.py --check: the JSON of every formula and planner figure, regenerated through
#      build/bin/formula_dump (common/formulas.hpp, 09_5d/planner.hpp), equals the committed JSON exactly;
#   2. tools/figures/verify_figures.py: every declared figure has a PNG that opens (size, pixels) and a JSON with
#      non-empty series, and a sample of the points of every formula series in every figure (run-based ones
#      too) recomputed by formula_dump equals the committed numbers; a chapter README shows every figure;
#   3. both must FAIL on a copy of docs/figures/ where one committed number was edited: a formula figure's
#      (caught by 1 and 2) and a formula line of a run-based figure's (caught by 2).
# Skipped, with the reason, only when no python3 here has matplotlib (scripts/install_deps.sh installs it with
# PENTA_FIGURES=1; CI sets it). Prints "N passed, N failed, N skipped"; `make test` runs it (not CH=NN).
#   bash tests/tooling/figures_test.sh        (BIN=build/bin by default; needs build/bin/formula_dump)
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-build/bin}
case $bin in /*) ;; *) bin=$src/$bin ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

py=""
for p in python3 /usr/bin/python3; do
    "$p" -c 'import matplotlib, PIL' 2>/dev/null && { py=$p; break; }
done
if [ -z "$py" ]; then
    echo "figures test: SKIPPED: no python3 with matplotlib and Pillow here (PENTA_FIGURES=1 bash scripts/install_deps.sh)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi

passed=0 failed=0
verdict() {  # name, 0 = pass; on failure the last lines of $out
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "figures test: PASS: $1"
    else failed=$((failed + 1)); echo "figures test: FAIL: $1"; echo "$out" | tail -n 12 | sed 's/^/    | /'; fi
}
if [ ! -x "$bin/formula_dump" ]; then
    out="build it: make $bin/formula_dump (make all builds it)"
    verdict "$bin/formula_dump exists" 1
    echo "$passed passed, $failed failed, 0 skipped"
    exit 1
fi

fig=$src/tools/figures
out=$("$py" "$fig/make_figures.py" --check --bin "$bin" --out "$src/docs/figures" 2>&1)
verdict "make_figures.py --check: formula/planner figures' JSON regenerated = committed" $?

out=$("$py" "$fig/verify_figures.py" --bin "$bin" --out "$src/docs/figures" 2>&1)
rc=$?
echo "$out" | grep -E '^FAIL' | sed 's/^/    /'
verdict "verify_figures.py: $(echo "$out" | tail -n 1) (PNGs open, series non-empty, formula points recomputed)" $rc

# 3. one committed number edited in a copy: each check must fail, naming the figure
# edit FIGURE: adds 1 to the first value of the first formula series of FIGURE.json in $tmp/figs (prints where)
edit() {
    "$py" - "$tmp/figs/$1.json" <<'EOF'
import json, sys
path = sys.argv[1]
data = json.load(open(path))
def find(x, where):
    if isinstance(x, dict):
        if "queries" in x and "values" in x and x["values"]:
            return x, where
        for k, v in x.items():
            r = find(v, f"{where}.{k}")
            if r: return r
    if isinstance(x, list):
        for i, v in enumerate(x):
            r = find(v, f"{where}[{i}]")
            if r: return r
s, where = find(data, "$")
v = s["values"][0]
if isinstance(v, dict):  # a dict of byte counts: edit its first number
    k = sorted(k for k in v if isinstance(v[k], (int, float)))[0]
    v[k] += 1
    where += f".values[0].{k}"
else:
    s["values"][0] = v + 1
    where += ".values[0]"
json.dump(data, open(path, "w"), indent=1, sort_keys=True)
print(where)
EOF
}
mutate() {  # NAME FIGURE CHECK...: edit FIGURE in a fresh copy, then the command must exit 1 naming FIGURE
    local name=$1 figure=$2 where rc
    shift 2
    rm -rf "$tmp/figs" && cp -r "$src/docs/figures" "$tmp/figs"
    if [ ! -f "$tmp/figs/$figure.json" ]; then out="no docs/figures/$figure.json"; verdict "$name" 1; return; fi
    where=$(edit "$figure") || { out=$where; verdict "$name: editing $figure.json" 1; return; }
    out=$("$@" 2>&1)
    rc=$?
    [ "$rc" = 1 ] && grep -q "$figure" <<<"$out"
    verdict "$name: $figure.json $where + 1 -> exit $rc (want 1, naming $figure)" $?
}
formula=$("$py" -c "
import sys; sys.path.insert(0, '$fig'); import make_figures
print(next(f.name for f in make_figures.load_figures() if f.source == 'formula'))")
run=$("$py" -c "
import sys, json; sys.path.insert(0, '$fig'); import make_figures
def has(x):
    return isinstance(x, dict) and ({'queries', 'values'} <= set(x) or any(has(v) for v in x.values())) or \
           isinstance(x, list) and any(has(v) for v in x)
print(next(f.name for f in make_figures.load_figures() if f.source == 'run' and has(json.load(open('$src/docs/figures/' + f.name + '.json')))))")
mutate "--check catches an edited formula figure" "$formula" "$py" "$fig/make_figures.py" --check --bin "$bin" --out "$tmp/figs"
mutate "verify catches an edited formula figure" "$formula" "$py" "$fig/verify_figures.py" --bin "$bin" --out "$tmp/figs" --only "$formula"
mutate "verify catches an edited formula line of a run figure" "$run" "$py" "$fig/verify_figures.py" --bin "$bin" --out "$tmp/figs" --only "$run"

echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
