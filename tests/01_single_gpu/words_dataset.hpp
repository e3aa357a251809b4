// words_dataset.hpp — a fixed text for the precision tests (chapter 01's bf16 weights, chapter 11's four
// policies): 64 KiB of 512 made-up words, drawn by the counter RNG. Implemented in words_dataset.cpp.
// Run the tests that use it: `make test CH=01`, `make test CH=11`.
#pragma once
#include <memory>

#include "../../common/data.hpp"

namespace penta::testing {

// Text, not the addition task: its loss falls smoothly, where the addition task's plateau breaks at a step
// that any rounding difference moves (an fp32 run with another micro-batch split differs by up to 19% per
// step there), which would compare chaos, not precision. 64 KiB of 512 made-up words of 2-7 letters, drawn
// by the counter RNG with Zipf-like frequencies, so the data never changes and stays far from memorised in
// 50 steps (an fp32 run with another micro-batch split agrees with it to 1e-5 at every step).
std::unique_ptr<Dataset> words_dataset(int32_t vocab);

}  // namespace penta::testing
