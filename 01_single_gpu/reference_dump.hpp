// reference_dump.hpp — writes what tools/torch_reference.py needs to check our model against an
// independent PyTorch implementation: the initial weights, one batch, our logits, loss and every
// gradient, then the weights after 5 AdamW steps (clipping included) on that batch.
//   build/bin/01_single_gpu --model tiny --dump-reference /tmp/ref && /usr/bin/python3 tools/torch_reference.py /tmp/ref
// The format is described at the top of tools/torch_reference.py.
#pragma once
#include <string>

#include "../common/config.hpp"
#include "../common/data.hpp"
#include "../common/model.hpp"

namespace penta {

// checker: the script the closing message tells the reader to run on the dump
void dump_reference(Model& model, const Dataset& data, const TrainConfig& cfg, const std::string& dir,
                    const char* checker = "tools/torch_reference.py");

}  // namespace penta
