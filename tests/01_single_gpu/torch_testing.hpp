// torch_testing.hpp — the interpreter the PyTorch checks run (tools/torch_reference.py, tools/torch_moe.py):
// the first python3 that imports torch and numpy, or "" (the check is then skipped, and reported so). Header
// only. Debian: apt-get install python3-torch (CI installs it: PENTA_TORCH=1 bash scripts/install_deps.sh).
// Run the tests that use it: `make test CH=01`, `make test CH=08`.
#pragma once
#include <cstdlib>
#include <string>

namespace penta::testing {

inline std::string python_with_torch() {
    for (const char* p : {"/usr/bin/python3", "python3"}) {
        const std::string cmd = std::string(p) + " -c 'import torch, numpy' >/dev/null 2>&1";
        if (std::system(cmd.c_str()) == 0) return p;
    }
    return "";
}

}  // namespace penta::testing
