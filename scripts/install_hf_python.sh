#!/usr/bin/env bash
# install_hf_python.sh — the Python packages pentatron's Hugging Face checks and tools use, for /usr/bin/python3
# (where Debian's python3-torch is): transformers (4.46, the last line that runs on Debian's torch 1.13),
# safetensors and tokenizers, from the Python package index. Idempotent: says so and changes nothing when they
# import. `PENTA_TORCH=1 bash scripts/install_deps.sh` (CI) calls it; the tests that need the packages call it
# when they are missing, and skip, saying why, only when it fails (no network, no torch).
# --tokenizers-only installs the tokenizers package alone, without PyTorch: all tools/prepare_data.py needs.
#   bash scripts/install_hf_python.sh                    transformers, safetensors, tokenizers (needs torch)
#   bash scripts/install_hf_python.sh --tokenizers-only  tokenizers (no torch needed)
set -uo pipefail
py=/usr/bin/python3
packages=(transformers safetensors tokenizers)
pins=('transformers==4.46.3' safetensors tokenizers)
case "${1:-}" in
    "") ;;
    --tokenizers-only) packages=(tokenizers) pins=(tokenizers) ;;
    *) echo "install_hf_python: unknown option '$1' (accepted: --tokenizers-only)" >&2; exit 2 ;;
esac
imports=$(IFS=,; echo "${packages[*]}")
if [ "${packages[*]}" != tokenizers ] && ! $py -c 'import torch' 2>/dev/null; then
    echo "install_hf_python: $py has no torch, which transformers needs (PENTA_TORCH=1 bash scripts/install_deps.sh" \
         "installs python3-torch; for tools/prepare_data.py alone: bash scripts/install_hf_python.sh --tokenizers-only)" >&2
    exit 1
fi
if $py -c "import $imports" 2>/dev/null; then
    echo "install_hf_python: ${packages[*]} present"
    exit 0
fi
echo "install_hf_python: installing ${pins[*]} for $py"
if ! $py -m pip install -q --break-system-packages "${pins[@]}"; then
    echo "install_hf_python: pip could not install them (no network?)" >&2
    exit 1
fi
$py -c "import $imports"
