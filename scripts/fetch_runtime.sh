#!/usr/bin/env bash
# fetch_runtime.sh — packs what a GPU machine without OpenMPI, OpenBLAS, doctest, nlohmann-json or make needs
# to build and run pentatron into .deps/runtime.tar.gz (ignored by git; about 24 MB, under the 64 MiB a
# device run can carry), for scripts/gpu_check.sh. Run it here (Debian 12, with apt); nothing is installed.
#
# It downloads the Debian packages (apt-get download), unpacks them (dpkg -x) and keeps what the build and
# the runs read: OpenMPI 4.1 with its launcher, plugins and help texts (relocated there with OPAL_PREFIX /
# PMIX_PREFIX) and the libraries it loads; OpenBLAS's library and headers (not its 58 MB static archive) and
# gfortran's runtime; the doctest and nlohmann-json headers; GNU make. Also a copy of this machine's nccl.h,
# for a machine whose NCCL (a pip wheel) came without its header. The prepared tree was 118 MB with the
# static archives, documentation and all of libopenblas-dev; trimmed, it packs to about a sixth.
# Before packing, every shared library and program in it must find each library it needs (objdump's NEEDED)
# in the folders scripts/gpu_env.sh puts on LD_LIBRARY_PATH, or be glibc, libstdc++ or libgcc_s (which any
# machine with a C++ compiler has): else it stops and lists what is missing. (libpmix2 needs libmunge2:
# without it the carried mpirun failed in MPI_Init, "opal_pmix_base_select failed".) zlib, libudev, libuuid
# and libatomic are packed apart (fallback/lib) and used only where the machine lacks them.
#   bash scripts/fetch_runtime.sh [DIR]   (DIR: default the repository's .deps) then take .deps/runtime.tar.gz
#                                         and .deps/nccl.h to the GPU machine (scripts/gpu_check.sh)
# tests/tooling/runtime_rehearsal_test.sh runs the packed OpenMPI here with the system's hidden.
set -euo pipefail
dest=$(cd "$(dirname "$0")/.." && pwd)/.deps
[ $# -gt 0 ] && dest=$1
dest=$(mkdir -p "$dest" && cd "$dest" && pwd)
cd "$(dirname "$0")/.."
pkgs=(
    # OpenMPI and what its libraries and plugins load
    openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libmunge2 libevent-core-2.1-7
    libevent-pthreads-2.1-7 libhwloc15 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1 libpsm2-2
    libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1
    # OpenBLAS (pthread flavour, as the Makefile's include path names) and its Fortran runtime
    libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
    # header-only libraries, and make
    doctest-dev nlohmann-json3-dev make
)
# base-system libraries some of the above load, packed apart (fallback/lib): gpu_env.sh uses each only where
# the machine lacks it
base_pkgs=(zlib1g libudev1 libuuid1 libatomic1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${pkgs[@]}" "${base_pkgs[@]}" >/dev/null 2>&1) ||
    { echo "fetch_runtime: apt-get download ${pkgs[*]} ${base_pkgs[*]} failed" >&2; exit 1; }
mkdir -p "$work/root" "$work/base" "$work/root/fallback/lib"
for p in "${pkgs[@]}"; do dpkg -x "$work"/"${p}"_*.deb "$work/root"; done
for p in "${base_pkgs[@]}"; do dpkg -x "$work"/"${p}"_*.deb "$work/base"; done
find "$work/base" -name 'lib*.so.*' -exec cp -a {} "$work/root/fallback/lib/" \;
r=$work/root
# what nothing reads here: documentation, static archives, Fortran / Java bindings, pkg-config and cmake files
rm -rf "$r"/usr/share/doc "$r"/usr/share/man "$r"/usr/share/lintian "$r"/usr/share/info "$r"/usr/share/locale
find "$r" -name '*.a' -delete
find "$r" \( -name 'libmpi_mpifh*' -o -name 'libmpi_usempi*' -o -name 'libmpi_java*' -o -name 'mpi.jar' \) -delete
# hwloc's plugins (GL, OpenCL, libxml2, PCI) load from a folder fixed at build time, absent there
rm -rf "$r"/usr/lib/x86_64-linux-gnu/hwloc
# Debian's alternatives (made by postinst, not dpkg -x): the names the build and the loader look for
ob=$r/usr/lib/x86_64-linux-gnu/openblas-pthread
ln -sf openblas-pthread/libopenblas.so.0 "$r/usr/lib/x86_64-linux-gnu/libopenblas.so.0"
[ -e "$ob/libopenblas.so" ] || ln -sf libopenblas.so.0 "$ob/libopenblas.so"
[ -e "$r/usr/bin/mpirun" ] || ln -sf orterun "$r/usr/bin/mpirun"
ln -sf ../../lib/libpsm1/libpsm_infinipath.so.1.16 "$r/usr/lib/x86_64-linux-gnu/libpsm_infinipath.so.1"
# OpenBLAS's Fortran runtime beside it: the "blas" folder is used even with the machine's own MPI
mv "$r"/usr/lib/x86_64-linux-gnu/libgfortran.so.5* "$r"/usr/lib/x86_64-linux-gnu/libquadmath.so.0* "$ob/"

# every ELF file's NEEDED libraries: in the folders gpu_env.sh searches, or part of any C++ toolchain
source scripts/gpu_env.sh
dirs=$(penta_runtime_libdirs "$r" blas; penta_runtime_libdirs "$r" mpi | sed "s|$r/fallback/use|$r/fallback/lib|")
base='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libutil\.so\.1|libresolv\.so\.2|ld-linux-x86-64\.so\.2|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
missing=$(find "$r" -type f \( -name '*.so*' -o -path '*/bin/*' \) | while read -r f; do
    head -c 4 "$f" | grep -q ELF || continue
    for n in $(objdump -p "$f" | awk '$1 == "NEEDED" {print $2}'); do
        grep -qE "$base" <<<"$n" && continue
        found=0
        for d in $dirs; do [ -e "$d/$n" ] && found=1 && break; done
        [ "$found" = 1 ] || echo "  ${f#$r/} needs $n"
    done
done)
if [ -n "$missing" ]; then
    echo "fetch_runtime: libraries the packed files need but the runtime does not hold (add their packages):" >&2
    echo "$missing" >&2
    exit 1
fi
[ -f /usr/local/cuda/include/nccl.h ] && cp /usr/local/cuda/include/nccl.h "$dest/nccl.h"
for p in "${pkgs[@]}" "${base_pkgs[@]}"; do dpkg-deb -f "$work"/"${p}"_*.deb Package Version | paste -sd' '; done >"$dest/runtime.txt"
tar -C "$work" -czf "$dest/runtime.tar.gz" root
rm -rf "$dest/root"  # gpu_env.sh unpacks the new one
echo "fetch_runtime: $dest/runtime.tar.gz: $(du -h "$dest/runtime.tar.gz" | cut -f1) packed, $(du -sh "$r" | cut -f1) unpacked" \
     "($((${#pkgs[@]} + ${#base_pkgs[@]})) packages, listed in runtime.txt); every NEEDED library resolves"
