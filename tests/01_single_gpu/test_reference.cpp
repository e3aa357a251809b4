// test_reference.cpp — chapter 01 checked against an independent implementation: PyTorch.
//
// Dumps the `tiny` model's weights, a batch, our logits, loss, every gradient and the weights after 5
// AdamW steps (01_single_gpu/reference_dump.cpp), then runs tools/torch_reference.py, which rebuilds the
// model in PyTorch (float64) and compares. Skipped, and reported as skipped, when no python3 imports torch
// (Debian: apt-get install python3-torch; CI installs it).
//   build/bin/tests_01 -ts='ch01 np1' -tc='*PyTorch*'
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "../../01_single_gpu/reference_dump.hpp"
#include "../testing.hpp"
#include "torch_testing.hpp"

using namespace penta;
using penta::testing::python_with_torch;

TEST_SUITE("ch01 np1") {
    TEST_CASE("model, gradients and 5 AdamW steps agree with an independent PyTorch implementation") {
        std::string py = python_with_torch();
        if (py.empty()) SKIP_TEST("no python3 that imports torch and numpy (apt-get install python3-torch)");
        for (bool tied : {true, false}) {
            CAPTURE(tied);
            LlamaConfig c = preset("tiny");
            c.tied_embeddings = tied;
            c.vocab = 256;  // the byte tokenizer of the addition task
            TrainConfig cfg;
            cfg.micro_batch = 2;
            cfg.seq = 16;
            cfg.lr = 1e-2f;
            cfg.grad_clip = 0.5f;  // small enough to clip, so clipping is compared too
            auto data = make_dataset("addition", 7, (int32_t)c.vocab);
            Model model(c, Device::cpu, 11);
            std::string dir = "/tmp/penta_reference_" + std::to_string(getpid()) + (tied ? "_tied" : "_untied");
            dump_reference(model, *data, cfg, dir);
            std::string cmd = py + " " PENTA_SOURCE_DIR "/tools/torch_reference.py " + dir;
            int rc = std::system(cmd.c_str());
            CHECK_MESSAGE(rc == 0, "tools/torch_reference.py reported a mismatch (see its output above)");
            std::system(("rm -rf " + dir).c_str());
        }
    }
}
