# gpu_env.sh — the environment that scripts/gpu_check.sh, gpu_bench.sh and gpu_lab.sh share on a GPU
# machine that may lack OpenMPI, OpenBLAS, doctest, nlohmann-json and make (the device image has the CUDA
# toolkit and PyTorch, no MPI, no apt, no network). Sourced, not run; each function sets variables, and
# returns non-zero with the reason in penta_env_error when it cannot do its part:
#   penta_env_runtime   .deps/runtime.tar.gz (scripts/fetch_runtime.sh) unpacked into .deps/root when newer;
#                       its OpenBLAS always, its headers and make where the machine lacks them
#   penta_env_mpi       the machine's MPI (mpicxx and an mpirun that answers), else the carried OpenMPI
#                       relocated (OPAL_PREFIX; PMIX_PREFIX = PMIx's own prefix, pmix2), else none;
#                       sets penta_mpi=1|0, penta_mpi_from, penta_mpi_make (make's MPI_CFLAGS/MPI_LIBS), MPIRUN
#   penta_mpi_probe DIR a three-line MPI program built and run alone (a singleton) and on 2 ranks: 0 when
#                       both work (DIR/mpi_probe.log says what happened)
#   penta_env_cuda      CUDA_HOME: $CUDA_HOME, else nvcc's, else /usr/local/cuda; nvcc on PATH
#   penta_env_gpu_libs DIR   NCCL, cuBLAS and cuBLASLt from the toolkit, the system, or PyTorch's wheels
#                       (python3's nvidia.nccl / nvidia.cublas: lib*.so.N, linked as DIR/lib/lib*.so)
# scripts/fetch_runtime.sh reads penta_runtime_libdirs to check that every library it packs can load.
#   source scripts/gpu_env.sh && penta_env_runtime && penta_env_mpi
# PENTA_DEPS (default <repo>/.deps) names the folder holding runtime.tar.gz; the rehearsal
# (tests/00_common/runtime_rehearsal_test.sh) points it at a scratch copy.

penta_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
penta_env_error=""
penta_prepend() { eval "export $1=\"$2\${$1:+:\$$1}\""; }

# penta_runtime_libdirs ROOT blas|mpi: the library folders of the unpacked runtime, in search order. blas:
# OpenBLAS and its Fortran runtime (always used); mpi: OpenMPI, PMIx, munge and what they load (used only
# with the carried OpenMPI: before a machine's own MPI they would replace its libmpi.so.40)
penta_runtime_libdirs() {
    local r=$1
    case $2 in
        blas) echo "$r/usr/lib/x86_64-linux-gnu/openblas-pthread" ;;
        mpi) echo "$r/usr/lib/x86_64-linux-gnu/openmpi/lib $r/usr/lib/x86_64-linux-gnu/pmix2/lib" \
                  "$r/usr/lib/x86_64-linux-gnu $r/lib/x86_64-linux-gnu $r/usr/lib/x86_64-linux-gnu/ucx" \
                  "$r/fallback/use" ;;
    esac
}

penta_env_runtime() {
    local deps=${PENTA_DEPS:-$penta_root/.deps} d lib
    penta_deps_root=$deps/root
    penta_have_deps=0
    if [ -f "$deps/runtime.tar.gz" ] && { [ ! -d "$penta_deps_root" ] || [ "$deps/runtime.tar.gz" -nt "$penta_deps_root" ]; }; then
        rm -rf "$penta_deps_root" && tar -C "$deps" -xzf "$deps/runtime.tar.gz" && touch "$penta_deps_root" ||
            { penta_env_error="cannot unpack $deps/runtime.tar.gz"; return 1; }
    fi
    export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
    local missing=()
    if [ -d "$penta_deps_root/usr" ]; then
        penta_have_deps=1
        local r=$penta_deps_root
        # OpenBLAS always from the runtime (the headers and library this tree was tested with)
        penta_prepend CPATH "$r/usr/include/x86_64-linux-gnu/openblas-pthread"
        for d in $(penta_runtime_libdirs "$r" blas); do
            penta_prepend LIBRARY_PATH "$d"
            penta_prepend LD_LIBRARY_PATH "$d"
        done
        { [ -f /usr/include/doctest/doctest.h ] && [ -f /usr/include/nlohmann/json.hpp ]; } || penta_prepend CPATH "$r/usr/include"
        command -v make >/dev/null || export PATH=$PATH:$r/usr/bin
        # the base-system libraries some of its libraries load (zlib, libudev, libuuid, libatomic): packed
        # apart, used one by one only where the machine lacks them (an older copy must not replace a newer)
        mkdir -p "$r/fallback/use"
        for lib in "$r"/fallback/lib/*.so.*; do
            [ -e "$lib" ] || continue
            ldconfig -p 2>/dev/null | awk '{print $1}' | grep -qxF "$(basename "$lib")" || ln -sf "$lib" "$r/fallback/use/"
        done
    else
        [ -f /usr/include/doctest/doctest.h ] || missing+=(doctest)
        [ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json)
        ldconfig -p 2>/dev/null | grep -q libopenblas || missing+=(OpenBLAS)
    fi
    command -v make >/dev/null || missing+=(make)
    if [ ${#missing[@]} -gt 0 ]; then
        penta_env_error="missing ${missing[*]} and no $deps/runtime.tar.gz (run scripts/fetch_runtime.sh on a Debian machine and carry .deps)"
        return 1
    fi
}

penta_env_mpi() {
    local r=${penta_deps_root:-${PENTA_DEPS:-$penta_root/.deps}/root} d
    penta_mpi=0 penta_mpi_from=none
    penta_mpi_make=()
    if command -v mpicxx >/dev/null && command -v mpirun >/dev/null && mpirun --version >/dev/null 2>&1; then
        penta_mpi=1 penta_mpi_from="the machine's ($(command -v mpirun))"
    elif [ -x "$r/usr/bin/orterun" ]; then
        penta_mpi=1 penta_mpi_from="the carried OpenMPI ($r/usr)"
        local ompi=$r/usr/lib/x86_64-linux-gnu/openmpi
        # OPAL_PREFIX relocates Open MPI (its plugins, help texts, orted); PMIx has its own prefix, pmix2,
        # under which it looks for its plugins and help texts (PMIX_PREFIX=usr made every rank warn)
        export OPAL_PREFIX=$r/usr PMIX_PREFIX=$r/usr/lib/x86_64-linux-gnu/pmix2 PATH=$r/usr/bin:$PATH
        for d in $(penta_runtime_libdirs "$r" mpi | tr ' ' '\n' | tac); do penta_prepend LD_LIBRARY_PATH "$d"; done
        penta_mpi_make=(MPI_CFLAGS="-I$ompi/include -I$ompi/include/openmpi" MPI_LIBS="-L$ompi/lib -lmpi")
    else
        penta_env_error="no MPI: no mpicxx with a working mpirun, and no carried OpenMPI in $r"
        return 1
    fi
    # one node, shared memory only: no network transports, no ssh (the isolated launcher where there is none)
    export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
    command -v ssh >/dev/null || export OMPI_MCA_plm=isolated
    export MPIRUN="mpirun $([ "$(id -u)" = 0 ] && echo --allow-run-as-root) --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1 -x LD_LIBRARY_PATH"
}

# a singleton (the program alone: Open MPI starts its own daemon) and 2 ranks under mpirun, each within 30 s
penta_mpi_probe() {
    local dir=$1 log=$1/mpi_probe.log cflags libs
    mkdir -p "$dir"
    if [ ${#penta_mpi_make[@]} -gt 0 ]; then cflags=${penta_mpi_make[0]#MPI_CFLAGS=} libs=${penta_mpi_make[1]#MPI_LIBS=}
    else cflags=$(mpicxx --showme:compile 2>/dev/null) libs=$(mpicxx --showme:link 2>/dev/null); fi
    printf '%s\n' '#include <mpi.h>' '#include <cstdio>' \
        'int main(int c, char** v) { MPI_Init(&c, &v); int r, n, s = 1; MPI_Comm_rank(MPI_COMM_WORLD, &r);' \
        '  MPI_Comm_size(MPI_COMM_WORLD, &n); MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);' \
        '  if (r == 0) std::printf("mpi_probe: %d rank(s), allreduce %d\n", n, s); MPI_Finalize(); return s == n ? 0 : 1; }' \
        >"$dir/mpi_probe.cpp"
    {
        echo "== build: g++ mpi_probe.cpp $cflags $libs"
        # shellcheck disable=SC2086  # the flags are words
        g++ -DOMPI_SKIP_MPICXX "$dir/mpi_probe.cpp" $cflags $libs -o "$dir/mpi_probe" &&
            echo "== singleton" && timeout -k 5 30 "$dir/mpi_probe" &&
            echo "== 2 ranks" && timeout -k 5 30 $MPIRUN -np 2 "$dir/mpi_probe"
    } >"$log" 2>&1
    local rc=$?
    # a help text PMIx or Open MPI could not find is a broken relocation even when the run succeeds
    if [ "$rc" = 0 ] && grep -q "Sorry!  You were supposed to get help" "$log"; then
        echo "== a help file was not found: the relocation (OPAL_PREFIX / PMIX_PREFIX) is wrong" >>"$log"
        rc=1
    fi
    return $rc
}

penta_env_cuda() {
    penta_cuda_home=${CUDA_HOME:-}
    if [ -z "$penta_cuda_home" ]; then
        if command -v nvcc >/dev/null; then penta_cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
        else penta_cuda_home=/usr/local/cuda; fi
    fi
    if [ ! -x "$penta_cuda_home/bin/nvcc" ]; then
        penta_env_error="no nvcc at $penta_cuda_home/bin (set CUDA_HOME)"
        return 1
    fi
    export PATH=$penta_cuda_home/bin:$PATH
}

# penta_find_lib NAME WHEEL HEADER: libNAME.so (and HEADER) findable by the build and the runs; sets penta_found
penta_find_lib() {
    local name=$1 wheel=$2 hdr=$3 d w so py
    for d in "$penta_cuda_home/lib64" "$penta_cuda_home/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu /usr/local/lib; do
        [ -e "$d/lib$name.so" ] || continue
        [ -z "$hdr" ] || [ -f "$penta_cuda_home/include/$hdr" ] || [ -f /usr/include/$hdr ] || [ -f "$d/../include/$hdr" ] || continue
        [ -f "$d/../include/$hdr" ] && penta_prepend CPATH "$d/../include"
        penta_prepend LIBRARY_PATH "$d"
        penta_prepend LD_LIBRARY_PATH "$d"
        penta_found=$d
        return 0
    done
    py=$(command -v python3 || true)
    w=$([ -n "$py" ] && "$py" -c "import nvidia.$wheel as m; print(list(m.__path__)[0])" 2>/dev/null)
    so=$(ls "$w"/lib/lib"$name".so* 2>/dev/null | head -n 1)
    [ -n "$w" ] && [ -n "$so" ] || return 1
    ln -sf "$so" "$penta_links/lib/lib$name.so"  # the wheels hold lib*.so.N only; the link step asks for lib*.so
    penta_prepend LD_LIBRARY_PATH "$w/lib"
    if [ -n "$hdr" ]; then
        if [ -f "$w/include/$hdr" ]; then ln -sf "$w/include/$hdr" "$penta_links/include/$hdr"
        elif [ -f "${PENTA_DEPS:-$penta_root/.deps}/$hdr" ]; then ln -sf "${PENTA_DEPS:-$penta_root/.deps}/$hdr" "$penta_links/include/$hdr"  # fetch_runtime.sh's copy
        else return 1; fi
    fi
    penta_found="$w (python3's nvidia.$wheel)"
}

penta_env_gpu_libs() {
    penta_links=$1
    mkdir -p "$penta_links/include" "$penta_links/lib"
    penta_prepend CPATH "$penta_links/include"
    penta_prepend LIBRARY_PATH "$penta_links/lib"
    if ! penta_find_lib nccl nccl nccl.h; then
        penta_env_error="no NCCL: not in $penta_cuda_home, the system or python3's nvidia.nccl (pip nvidia-nccl-cu13)"
        return 1
    fi
    penta_nccl=$penta_found
    local lib
    for lib in cublas cublasLt; do
        if ! penta_find_lib "$lib" cublas ""; then
            penta_env_error="no lib$lib.so in $penta_cuda_home, the system or python3's nvidia.cublas"
            return 1
        fi
    done
    penta_cublas=$penta_found
}
