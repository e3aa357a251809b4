// test_reference.cpp — chapter 01 checked against an independent implementation: PyTorch.
//
// Dumps the `tiny` model's weights, a batch, our logits, loss, every gradient and the weights after 5
// AdamW steps (01_single_gpu/reference_dump.cpp) for each case of reference_testing.hpp (tied and untied
// at init, untied far from init), then runs tools/torch_reference.py, which rebuilds the model in PyTorch
// (float64) and compares. Skipped, and reported as skipped, when no python3 imports torch (Debian:
// apt-get install python3-torch; CI installs it) or PENTA_NO_TORCH=1. Without PyTorch chapter 01 is still
// graded against PyTorch's values: test_golden.cpp.
//   build/bin/tests_01 -ts='ch01 np1' -tc='*PyTorch*'
#include <unistd.h>

#include "reference_testing.hpp"

using namespace penta;
using namespace penta::testing;

TEST_SUITE("ch01 np1") {
    TEST_CASE("model, gradients and 5 AdamW steps agree with an independent PyTorch implementation") {
        const std::string py = python_with_torch();
        if (py.empty()) SKIP_TEST("no python3 that imports torch and numpy (apt-get install python3-torch), or PENTA_NO_TORCH=1");
        for (const ReferenceCase& rc : reference_cases()) {
            const std::string name = rc.name;
            CAPTURE(name);
            const std::string dir = "/tmp/penta_reference_" + std::to_string(getpid()) + "_" + rc.name;
            write_reference_dump(rc, dir);
            const std::string cmd = py + " " PENTA_SOURCE_DIR "/tools/torch_reference.py " + dir;
            const int rc_py = std::system(cmd.c_str());
            CHECK_MESSAGE(rc_py == 0, "tools/torch_reference.py reported a mismatch (see its output above)");
            std::system(("rm -rf " + dir).c_str());
        }
    }
}
