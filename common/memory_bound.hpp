// memory_bound.hpp — before anything is allocated, the bytes the rank that holds the most must have at
// least, so that a model or a layout that cannot fit fails at once, naming the bytes of each kind and the
// flags that would cut them, instead of in the allocator or the kernel's OOM killer. resolve_model
// (train_loop.hpp) calls it for every chapter's --model.
//
// Playbook: "First steps: training on one GPU" (memory usage: weights, gradients, optimizer states,
// activations), "ZeRO", "Tensor parallelism", "Pipeline parallelism", "Mixed precision training" (the
// bytes a parameter of each policy). Test: tests/01_single_gpu/test_memory_bound.cpp
// (`build/bin/tests_01 -ts='ch01 np1' -tc='memory bound*'`).
#pragma once
#include "config.hpp"
#include "model_config.hpp"
#include "tensor.hpp"

namespace penta {

constexpr int kZeroUnknown = -1;  // a chapter that does not say its --zero: ZeRO as deep as the layout allows

// Bytes the rank that holds the most allocates at least, by kind. Model state in the precision policy's
// bytes (--precision): weights, gradients, and AdamW's two f32 moments and f32 master copy, which --steps 0
// never allocates; each cut by --tp (a MoE's experts also by --ep), ZeRO's stage over dp x cp (1: AdamW's
// state, 2: + gradients, 3: + weights), and the pipeline: the largest of the --pp stages holds at least their
// average, ceil(L / pp) layers, and the embedding or the head with a layer. Then one micro-batch's
// activations in that stage (formulas.hpp; cut by --tp and --cp; none with --steps 0) and, on the host, the
// step's token batch.
struct MemoryBound {
    double weights = 0, grads = 0, optim = 0, acts = 0, batch = 0;
    double total() const { return weights + grads + optim + acts + batch; }
    MemoryBound& operator+=(const MemoryBound& o);
    MemoryBound scaled(double f) const;
};
MemoryBound memory_lower_bound(const TrainConfig& cfg, const LlamaConfig& mc, Device device, int zero = kZeroUnknown);
// Throws naming the flags and the bytes of each kind when memory_lower_bound exceeds the memory one rank has
// (capacity; 0: the GPU's, on CPU the node's RAM over its ranks).
void check_memory_bound(const TrainConfig& cfg, const LlamaConfig& mc, Device device, int zero = kZeroUnknown,
                        double capacity = 0);

}  // namespace penta
