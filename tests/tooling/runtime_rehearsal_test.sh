#!/usr/bin/env bash
# runtime_rehearsal_test.sh — the carried runtime (scripts/fetch_runtime.sh's runtime.tar.gz) must start
# Open MPI on a machine that has none, as the GPU machine has none: here, in a mount namespace (unshare -m)
# where every file of the system's OpenMPI, PMIx, munge, hwloc, libevent, libfabric, UCX ... packages is
# hidden under an empty file, it unpacks the runtime into a scratch folder, sets the environment up with
# scripts/gpu_env.sh as gpu_check.sh does, and runs
#   1. gpu_env.sh's probe: an MPI program alone (a singleton: Open MPI starts its own daemon) and on 2 ranks,
#      with no help text missing (a wrong OPAL_PREFIX / PMIX_PREFIX prints "Sorry!  You were supposed to get
#      help ...");
#   2. a 2-rank chapter-02 job with the carried mpirun (data parallel, 2 steps), the program built here.
# Packages that runtime.tar.gz lacks (libmunge2 before this test existed: "opal_pmix_base_select failed")
# fail it. The runtime is made once and kept in $BUILD/runtime-rehearsal (rebuilt when fetch_runtime.sh
# changes; apt-get download, about 20 s to 2 min); later runs take about 10 s. Skipped, saying why, where
# mount namespaces are not permitted, nothing can be downloaded, or the build has no MPI.
#   bash tests/tooling/runtime_rehearsal_test.sh        (make test runs it)
# PENTA_RUNTIME_TARBALL=FILE rehearses that runtime instead (e.g. one made by an older fetch_runtime.sh).
source "$(dirname "$0")/../expect_fail.sh"
cd "$(dirname "$0")/../.."
expect_needs_mpi "runtime rehearsal"
skip() {
    echo "$expect_name: skipped: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}
[ "$(id -u)" = 0 ] || skip "mount namespaces need root here (unshare -m; run as root, as CI does)"
unshare -m true 2>/dev/null || skip "mount namespaces are not permitted here (unshare -m true failed)"
command -v dpkg >/dev/null || skip "not a Debian machine: no dpkg to list the MPI packages' files"
[ -x "$BIN/02_data_parallel" ] || { expect_verdict "the chapter-02 program" "$BIN/02_data_parallel is not built" "" ""; expect_summary; exit; }

tarball=${PENTA_RUNTIME_TARBALL:-}
if [ -z "$tarball" ]; then
    cache=${BUILD:-build}/runtime-rehearsal
    key=$(cat scripts/fetch_runtime.sh scripts/gpu_env.sh | sha256sum | cut -c1-16)
    if [ "$(cat "$cache/key" 2>/dev/null)" != "$key" ] || [ ! -f "$cache/runtime.tar.gz" ]; then
        rm -rf "$cache" && mkdir -p "$cache"
        if ! out=$(bash scripts/fetch_runtime.sh "$cache" 2>&1); then
            grep -qE "Failed to fetch|Unable to locate|Temporary failure|Could not resolve|apt-get download .* failed" <<<"$out" &&
                ! grep -q "does not hold" <<<"$out" && skip "fetch_runtime.sh could not download the packages: $(grep -m 1 -E '^(E|W):' <<<"$out")"
            expect_verdict "fetch_runtime.sh packs a runtime whose libraries all resolve" "it failed" "" "$out"
            expect_summary
            exit
        fi
        echo "$key" >"$cache/key"
        echo "$expect_name: $(tail -n 1 <<<"$out")"
    fi
    tarball=$cache/runtime.tar.gz
fi
echo "$expect_name: rehearsing $tarball"

# the packages whose files are hidden: Open MPI and everything it loads that a bare machine lacks
pkgs="openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libmunge2 libhwloc15 libhwloc-plugins
      libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1
      libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1"
hidden=$TMP/hidden
dpkg -L $pkgs 2>/dev/null | while IFS= read -r f; do [ -f "$f" ] && [ ! -L "$f" ] && echo "$f"; done >"$hidden"
grep -q 'libmunge.so.2' "$hidden" && grep -q 'libmpi.so.40' "$hidden" && grep -q 'libpmix.so.2' "$hidden" ||
    skip "the system's libmpi.so.40, libpmix.so.2 and libmunge.so.2 are not all installed as Debian packages here: nothing to hide"
mkdir -p "$TMP/deps"
cp "$tarball" "$TMP/deps/runtime.tar.gz"

# inside the namespace: hide, set up as gpu_check.sh does, probe, then chapter 02 on 2 ranks
cat >"$TMP/inside.sh" <<'EOF'
set -u
n=0
while IFS= read -r f; do mount --bind /dev/null "$f" && n=$((n + 1)); done <"$1"
echo "hidden: $n files of the system's MPI packages (libmpi, libpmix, libmunge, mpirun, orted ...)"
for f in /usr/bin/orterun /usr/lib/x86_64-linux-gnu/libmunge.so.2.0.0; do
    [ -s "$f" ] && { echo "rehearsal: $f is still readable after hiding"; exit 3; }
done
export PENTA_DEPS=$2/deps  # the scratch copy, not the repository's .deps
source scripts/gpu_env.sh
penta_env_runtime || { echo "gpu_env: $penta_env_error"; exit 1; }
penta_env_mpi || { echo "gpu_env: $penta_env_error"; exit 1; }
echo "MPI: $penta_mpi_from"
[[ $penta_mpi_from == "the carried OpenMPI"* ]] || { echo "rehearsal: not the carried OpenMPI"; exit 1; }
penta_mpi_probe "$2/probe"
rc=$?
cat "$2/probe/mpi_probe.log"
[ "$rc" = 0 ] || { echo "rehearsal: the MPI probe failed (exit $rc): $(grep -m 3 -E 'unable to open|_select failed|Sorry' "$2/probe/mpi_probe.log" | sed -E 's/^ +//' | tr '\n' ' ')"; exit 1; }
echo "== chapter 02, 2 ranks: $MPIRUN -np 2 $3/02_data_parallel"
$MPIRUN -np 2 "$3/02_data_parallel" --dp 2 --steps 2 --log-every 1 --eval-every 0 2>&1
EOF
expect_ok "carried mpirun: probe alone and on 2 ranks, then chapter 02 on 2 ranks, the system's MPI hidden" 240 \
    "the carried OpenMPI && mpi_probe: 1 rank(s), allreduce 1 && mpi_probe: 2 rank(s), allreduce 2 && step 2" \
    unshare -m bash "$TMP/inside.sh" "$hidden" "$TMP" "$(cd "$BIN" && pwd)"
expect_summary
