#!/usr/bin/env bash
# fetch_runtime.sh — packs the build's Debian dependencies into .deps/ (ignored by git) so that
# scripts/gpu_check.sh can build on a GPU machine that has the CUDA toolkit but no OpenBLAS, doctest or
# nlohmann-json, and no network. Run it here (Debian, with apt) before sending the tree to such a machine.
# It fetches the .deb files (apt-get download) and unpacks them into .deps/root with dpkg -x; nothing is
# installed on this machine. The GPU build uses MPI=0 (single rank) unless the machine has its own mpicxx.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 doctest-dev nlohmann-json3-dev)
mkdir -p .deps/debs .deps/root
(cd .deps/debs && apt-get download "${pkgs[@]}")
for d in .deps/debs/*.deb; do dpkg -x "$d" .deps/root; done
echo "fetch_runtime: unpacked ${pkgs[*]} into .deps/root ($(du -sh .deps | cut -f1))"
