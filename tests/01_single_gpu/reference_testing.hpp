// reference_testing.hpp — what chapter 01's two checks against PyTorch share: the runs they dump
// (01_single_gpu/reference_dump.cpp) and the python that imports torch.
//   test_reference.cpp  runs tools/torch_reference.py on a fresh dump (skipped without PyTorch)
//   test_golden.cpp     compares a fresh dump with the values that script stored in tests/01_single_gpu/golden/
//                       (needs no PyTorch: it is what grades chapter 01 on a machine without it)
// Run both: `make test CH=01`, or `build/bin/tests_01 -ts='ch01 np1' -tc='*PyTorch*'`.
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "../../01_single_gpu/reference_dump.hpp"
#include "../../common/ops.hpp"
#include "../testing.hpp"
#include "torch_testing.hpp"  // python_with_torch

namespace penta::testing {

// One dumped run: the `tiny` model over the byte vocabulary of the addition task, a batch of 2 x 16.
//   at init     the weights as the model initialises them (std 0.02: attention is nearly uniform, gradients
//               small), tied and untied embeddings
//   far         untied, weights far from init (matrices N(0, 0.3^2), norms 1 + N(0, 0.3^2)): attention is
//               peaked, so RoPE, the mask and the norms change the logits by far more than rounding
struct ReferenceCase {
    const char* name;  // also the golden file's: tests/01_single_gpu/golden/<name>.json
    bool tied, far;
};
inline std::vector<ReferenceCase> reference_cases() {
    return {{"tied", true, false}, {"untied", false, false}, {"far", false, true}};
}

// Writes the dump of `rc` to `dir` (01_single_gpu's dump_reference: weights, batch, logits, loss, every
// gradient, the weights after 5 AdamW steps with clipping).
inline void write_reference_dump(const ReferenceCase& rc, const std::string& dir) {
    LlamaConfig c = preset("tiny");
    c.tied_embeddings = rc.tied;
    c.vocab = 256;  // the byte tokenizer of the addition task
    TrainConfig cfg;
    cfg.micro_batch = 2;
    cfg.seq = 16;
    cfg.lr = 1e-2f;
    cfg.grad_clip = 0.5f;  // small enough to clip, so clipping is compared too
    auto data = make_dataset("addition", 7, (int32_t)c.vocab);
    Model model(c, Device::cpu, 11);
    if (rc.far) {
        float* p = model.params().ptr<float>();
        for (const ParamTensor& t : model.tensors())
            for (int64_t i = 0; i < t.numel(); i++)
                p[t.offset + i] = (t.init_std == 0 ? 1.0f : 0.0f) + 0.3f * rng_normal(99, name_stream(t.name), (uint64_t)i);
    }
    dump_reference(model, *data, cfg, dir);
}

}  // namespace penta::testing
