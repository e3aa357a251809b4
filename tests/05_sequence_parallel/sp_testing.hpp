// sp_testing.hpp — chapter 05's pieces for the tensor-parallel test helpers (tests/04_tensor_parallel/
// tp_testing.hpp): SequenceParallel as the boundary and norm_region_activation_bytes. Chapter 04's helpers may not include chapter 05, so test_sp.cpp hands these
// to run_layout, check_trains_like_one_rank and check_model_step. Implemented in sp_testing.cpp.
// Playbook: "Sequence parallelism". Run the tests that use them: `make test CH=05`.
#pragma once
#include "../04_tensor_parallel/tp_testing.hpp"

namespace penta::tp_testing {

// sequence parallelism as 05_sequence_parallel/sequence_parallel.hpp implements it
const SpParts& sp_parts();

}  // namespace penta::tp_testing
