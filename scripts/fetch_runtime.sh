#!/usr/bin/env bash
# fetch_runtime.sh — packs what a GPU machine without OpenMPI, OpenBLAS, doctest, nlohmann-json or make needs
# to build and run pentatron into .deps/runtime.tar.gz (ignored by git; about 20 MB, under the 64 MiB a
# device run can carry), for scripts/gpu_check.sh. Run it here (Debian 12, with apt); nothing is installed.
#
# It downloads the Debian packages (apt-get download), unpacks them (dpkg -x) and keeps what the build and
# the runs read: OpenMPI 4.1 with its launcher, plugins and help texts (relocated there with OPAL_PREFIX /
# PMIX_PREFIX) and the libraries it loads; OpenBLAS's library and headers (not its 58 MB static archive) and
# gfortran's runtime; the doctest and nlohmann-json headers; GNU make. Also a copy of this machine's nccl.h,
# for a machine whose NCCL (a pip wheel) came without its header. The prepared tree was 118 MB with the
# static archives, documentation and all of libopenblas-dev; trimmed, it packs to about a sixth.
#   bash scripts/fetch_runtime.sh        then carry .deps on the device run (see scripts/gpu_check.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(
    # OpenMPI and what its libraries and plugins load
    openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7
    libhwloc15 libhwloc-plugins libfabric1 libucx0 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1
    libnl-3-200 libnl-route-3-200 libnuma1
    # OpenBLAS (pthread flavour, as the Makefile's include path names) and its Fortran runtime
    libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
    # header-only libraries, and make
    doctest-dev nlohmann-json3-dev make
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${pkgs[@]}" >/dev/null)
mkdir -p "$work/root"
for d in "$work"/*.deb; do dpkg -x "$d" "$work/root"; done
r=$work/root
# what nothing reads here: documentation, static archives, Fortran / Java bindings, pkg-config and cmake files
rm -rf "$r"/usr/share/doc "$r"/usr/share/man "$r"/usr/share/lintian "$r"/usr/share/info "$r"/usr/share/locale
find "$r" -name '*.a' -delete
find "$r" \( -name 'libmpi_mpifh*' -o -name 'libmpi_usempi*' -o -name 'libmpi_java*' -o -name 'mpi.jar' \) -delete
# Debian's alternatives (made by postinst, not dpkg -x): the names the build and the loader look for
ob=$r/usr/lib/x86_64-linux-gnu/openblas-pthread
ln -sf openblas-pthread/libopenblas.so.0 "$r/usr/lib/x86_64-linux-gnu/libopenblas.so.0"
[ -e "$ob/libopenblas.so" ] || ln -sf libopenblas.so.0 "$ob/libopenblas.so"
[ -e "$r/usr/bin/mpirun" ] || ln -sf orterun "$r/usr/bin/mpirun"
mkdir -p .deps
[ -f /usr/local/cuda/include/nccl.h ] && cp /usr/local/cuda/include/nccl.h .deps/nccl.h
for p in "${pkgs[@]}"; do dpkg-deb -f "$work"/"${p}"_*.deb Package Version | paste -sd' '; done >.deps/runtime.txt
tar -C "$work" -czf .deps/runtime.tar.gz root
rm -rf .deps/root  # gpu_check.sh unpacks the new one
echo "fetch_runtime: .deps/runtime.tar.gz: $(du -h .deps/runtime.tar.gz | cut -f1) packed, $(du -sh "$r" | cut -f1) unpacked" \
     "(${#pkgs[@]} packages, listed in .deps/runtime.txt)"
