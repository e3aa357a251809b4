// moe_reference_dump.hpp — what tools/torch_moe.py needs to check the MoE model against Mixtral's block in
// PyTorch: chapter 01's dump (the initial weights, one batch, our logits, loss and every gradient, the weights
// after 5 AdamW steps; 01_single_gpu/reference_dump.hpp) of the model with the MoE layer; moe.json: the MoE
// shape, the balance loss's coefficient and its value at the initial weights; routing.bin: the experts every
// forward of the dump chose (int32, forward after forward, MoE layer after layer, (N, k) each). The top-k is a
// step function: over 5 AdamW steps float32 and float64 drift apart enough that a token at a near tie may
// choose another expert on one side; the checker finds such tokens by comparing its routing with ours, and
// fails on any that is not at a near tie.
//   build/bin/08_expert_parallel --dp 1 --ep 1 --dump-reference /tmp/moe && /usr/bin/python3 tools/torch_moe.py /tmp/moe
// Playbook: "Expert parallelism". Test: `make test CH=08` (tests/08_expert_parallel/test_moe_reference.cpp).
#pragma once
#include <string>

#include "../01_single_gpu/reference_dump.hpp"
#include "moe_layer.hpp"

namespace penta {

// model: built on one rank with `moe` as its MLP core, its weights as initialised (no step taken yet)
void dump_moe_reference(Model& model, MoeLayer& moe, const Dataset& data, const TrainConfig& cfg,
                        const std::string& dir);

}  // namespace penta
