// checkpoint_state.hpp — the seam through which a chapter hands training state that lives outside the model's
// flat buffer and the optimizer to the checkpoint (chapter 08's `--moe-balance bias`: one (E) bias per MoE
// layer, updated after every step). common/ includes no chapter, so the chapter's hook says what it keeps:
// a hook that is also a CheckpointedState lists its tensors, and the training loop hands them to the
// Checkpointer (saved as pieces of kind "state") and to load_checkpoint (restored before the first step).
//
// Each tensor is described as a parameter would be (ParamTensor): its name (unique in the checkpoint), its
// global shape, this rank's block of it (shape, row0, col0) and the axes it is sharded on. So the save writes
// it once (counts_in_grad_norm's owner among the ranks that hold the same values) and a resume in another
// layout reads the slices it needs by the same index arithmetic as the weights (checkpoint_load.hpp).
// A resume whose checkpoint lacks a state tensor this run keeps is an error naming it (not a silent zero).
// Playbook: seed 003 (a checkpoint is the whole training state). Test: tests/08_expert_parallel/checkpoint_test.sh.
#pragma once
#include <vector>

#include "model_layout.hpp"
#include "tensor.hpp"

namespace penta {

struct StateTensor {
    ParamTensor where;      // name, full_shape, this rank's block (shape, row0, col0), sharded_on; offset unused
    Tensor* values = nullptr;  // this rank's block, f32, on any device; outlives the Checkpointer
};

class CheckpointedState {
   public:
    virtual ~CheckpointedState() = default;
    // the state this rank holds, given the model's layout (a pipeline stage lists only its layers' state)
    virtual std::vector<StateTensor> checkpoint_state(const ParamLayout& layout) = 0;
};

}  // namespace penta
