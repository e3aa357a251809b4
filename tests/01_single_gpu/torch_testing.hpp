// torch_testing.hpp — the interpreter the PyTorch checks run (tools/torch_reference.py, tools/torch_moe.py):
// /usr/bin/python3 first (Debian's python3-torch installs for it), then the first python3 on PATH that imports
// torch and numpy; "" when none does, or when PENTA_NO_TORCH=1 hides PyTorch (the mutation harness sets it,
// so that the golden values alone must catch a wrong model): the check is then skipped, and reported so.
// Header only. Debian: apt-get install python3-torch (CI installs it: PENTA_TORCH=1 bash scripts/install_deps.sh).
// Run the tests that use it: `make test CH=01`, `make test CH=08`.
#pragma once
#include <cstdlib>
#include <string>

namespace penta::testing {

inline std::string python_with_torch() {
    const char* hide = std::getenv("PENTA_NO_TORCH");
    if (hide && std::string(hide) == "1") return "";
    for (const char* p : {"/usr/bin/python3", "python3"}) {
        const std::string cmd = std::string(p) + " -c 'import torch, numpy' >/dev/null 2>&1";
        if (std::system(cmd.c_str()) == 0) return p;
    }
    return "";
}

}  // namespace penta::testing
