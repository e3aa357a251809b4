#!/usr/bin/env bash
# install_hf_python.sh — the Python packages pentatron's Hugging Face checks and tools use, for /usr/bin/python3
# (where Debian's python3-torch is): transformers (4.46, the last line that runs on Debian's torch 1.13),
# safetensors and tokenizers, from the Python package index. Idempotent: says so and changes nothing when they
# import. `PENTA_TORCH=1 bash scripts/install_deps.sh` (CI) calls it; the tests that need the packages call it
# when they are missing, and skip, saying why, only when it fails (no network, no torch).
#   bash scripts/install_hf_python.sh
set -uo pipefail
py=/usr/bin/python3
if ! $py -c 'import torch' 2>/dev/null; then
    echo "install_hf_python: $py has no torch (PENTA_TORCH=1 bash scripts/install_deps.sh installs python3-torch)" >&2
    exit 1
fi
if $py -c 'import transformers, safetensors, tokenizers' 2>/dev/null; then
    echo "install_hf_python: transformers, safetensors and tokenizers present"
    exit 0
fi
echo "install_hf_python: installing transformers==4.46.3 safetensors tokenizers for $py"
if ! $py -m pip install -q --break-system-packages 'transformers==4.46.3' safetensors tokenizers; then
    echo "install_hf_python: pip could not install them (no network?)" >&2
    exit 1
fi
$py -c 'import transformers, safetensors, tokenizers'
