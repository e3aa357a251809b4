#!/usr/bin/env bash
# install_deps.sh — installs the Debian packages pentatron builds and tests with, if any are missing.
#
#   bash scripts/install_deps.sh            # install what is missing (needs root or sudo, and apt)
#   bash scripts/install_deps.sh --check    # only report; exit 1 if something is missing
#   PENTA_FIGURES=1 bash scripts/install_deps.sh   # also matplotlib, for `make figures` (CI sets it)
#
# Idempotent: when everything is present it says so and changes nothing. `make`, `make test` and
# `.ci/run` call it. PyTorch (python3-torch) is optional: it only enables the comparisons with independent
# implementations (chapter 01's PyTorch Llama; Hugging Face transformers for --model DIR / --export-hf, the
# tokenizers library for tools/prepare_data.py), so it is installed with the rest when PENTA_TORCH=1 (CI sets
# it), and then transformers, safetensors and tokenizers from the Python package index
# (scripts/install_hf_python.sh).
set -euo pipefail

required=(g++ make openmpi-bin libopenmpi-dev libopenblas-dev doctest-dev nlohmann-json3-dev)
optional=()
[ "${PENTA_TORCH:-0}" = 1 ] && optional+=(python3-torch python3-numpy)
[ "${PENTA_FIGURES:-0}" = 1 ] && optional+=(python3-matplotlib)

missing=()
for p in "${required[@]}" "${optional[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

hf_python() {  # with PENTA_TORCH=1: the Python packages of the Hugging Face checks
    [ "${PENTA_TORCH:-0}" = 1 ] || return 0
    [ "${1:-}" = --check ] && { /usr/bin/python3 -c 'import transformers, safetensors, tokenizers' 2>/dev/null; return; }
    bash "$(dirname "$0")/install_hf_python.sh"
}
if [ ${#missing[@]} -eq 0 ]; then
    echo "install_deps: all packages present (${required[*]} ${optional[*]})"
    hf_python "${1:-}"
    exit
fi
echo "install_deps: missing Debian packages: ${missing[*]}"
[ "${1:-}" = --check ] && exit 1

if ! command -v apt-get >/dev/null; then
    echo "install_deps: no apt-get here; install these packages (or equivalents) by hand: ${missing[*]}" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then sudo="sudo"; else
        echo "install_deps: need root (or sudo) to install ${missing[*]}; run as root or install them by hand" >&2
        exit 1
    fi
fi
echo "install_deps: running apt-get update and apt-get install -y ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get update -qq || ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    echo "install_deps: apt-get failed to install ${missing[*]} (no network? no Debian mirror?)" >&2
    exit 1
fi
echo "install_deps: installed ${missing[*]}"
hf_python
