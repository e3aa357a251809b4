// sp_testing.cpp — sp_parts() of sp_testing.hpp: chapter 05's SequenceParallel and
// norm_region_activation_bytes, as the tensor-parallel test helpers take them (SpParts).
#include "sp_testing.hpp"

#include "../../05_sequence_parallel/sequence_parallel.hpp"

namespace penta::tp_testing {

const SpParts& sp_parts() {
    static const SpParts parts{
        [](Comm& tp) -> std::unique_ptr<TensorParallel> { return std::make_unique<SequenceParallel>(tp); },
        [](const MicroBatchActs& acts) { return norm_region_activation_bytes(acts); },
    };
    return parts;
}

}  // namespace penta::tp_testing
