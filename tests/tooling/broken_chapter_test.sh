#!/usr/bin/env bash
# broken_chapter_test.sh — a broken later chapter must not fail an earlier chapter's grading.
#
# In a workshop the last chapter is often broken on purpose (a blank to fill in) or half done; `make test
# CH=01` must still build and pass. This copies the working tree (git ls-files -co --exclude-standard) and
# the build folder to a scratch folder, keeping every timestamp so make recompiles nothing, plants
# `#error planted by broken_chapter_test` at the end of the last chapter's concept files (not its program,
# train.cpp or lab.cpp)
# and of its tests' test_*.cpp, and runs there
#   1. make test CH=01        must exit 0 with "0 failed": nothing of the last chapter is compiled or run;
#   2. make test CH=<last>    must fail, naming the planted error: the plant bites, so check 1 can fail.
# The inner makes use the outer one's build options (BUILD, CUDA, MPI, DEBUG, ARCH in the environment, as
# the Makefile's test target passes them). Prints "N passed, N failed, N skipped" like the test binaries.
# `make test` runs it, after building everything (so the copied objects are current); `make test CH=NN`
# does not. By hand: bash tests/tooling/broken_chapter_test.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
[[ "$build" = /* ]] || build=$src/$build
cd "$src" || exit 1

chapters=$(ls -d [0-9][0-9]_*/ 2>/dev/null | while read -r d; do [ -f "$d/train.cpp" ] || [ -f "$d/lab.cpp" ] && echo "${d%/}"; done)
first=$(head -n 1 <<<"$chapters") last=$(tail -n 1 <<<"$chapters")
if [ -z "$first" ] || [ "$first" = "$last" ]; then
    echo "broken chapter test: skipped (it needs two chapters; found: ${chapters:-none})"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
n_first=${first:0:2} n_last=${last:0:2}

t0=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the working tree as git sees it (tracked and untracked, not ignored), with its timestamps
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 -r cp -a --parents -t "$tmp"
# the build folder, timestamps kept (cp -a): the objects stay newer than their sources, so nothing recompiles
if [ -d "$build" ]; then
    cp -a "$build" "$tmp/build"
else
    echo "broken chapter test: no build folder $build to reuse: the scratch copy builds from scratch (slow)"
fi
echo "broken chapter test: copied to $tmp in $((SECONDS - t0)) s"

planted=()
for f in $(ls "$last"/*.cpp tests/"$n_last"_*/test_*.cpp 2>/dev/null | grep -v -E '/(train|lab)\.cpp$'); do
    printf '\n#error planted by broken_chapter_test\n' >>"$tmp/$f"
    planted+=("$f")
done
echo "broken chapter test: planted #error in ${planted[*]}"

unset MAKEFLAGS MFLAGS MAKELEVEL  # the outer make's flags (CH, jobserver) are not the inner makes' business
opts=(-C "$tmp" -j"$(nproc)" BUILD=build)
for v in CUDA MPI DEBUG ARCH; do [ -n "${!v:-}" ] && opts+=("$v=${!v}"); done

passed=0 failed=0
verdict() {  # name, 0 = pass; on failure the end of the inner make's output
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "broken chapter test: PASS: $1"
    else failed=$((failed + 1)); echo "broken chapter test: FAIL: $1"; tail -n 25 <<<"$out" | sed 's/^/    | /'; fi
}

t=$SECONDS
out=$(make "${opts[@]}" test CH="$n_first" 2>&1)
rc=$?
ok=1
[ "$rc" = 0 ] && grep -qE '^total: [0-9]+ passed, 0 failed' <<<"$out" && ! grep -q 'planted by' <<<"$out" && ok=0
verdict "make test CH=$n_first passes with chapter $n_last broken (exit status $rc, $((SECONDS - t)) s; $(grep '^total:' <<<"$out"))" $ok

t=$SECONDS
out=$(make "${opts[@]}" test CH="$n_last" 2>&1)
rc=$?
ok=1
[ "$rc" != 0 ] && grep -q 'error: #error planted by broken_chapter_test' <<<"$out" && ok=0
verdict "make test CH=$n_last fails on the planted #error (exit status $rc, $((SECONDS - t)) s)" $ok

echo "broken chapter test took $((SECONDS - t0)) s"
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
