// model_layout.hpp — where every parameter lives in the ONE flat buffer, for the full model or for a
// tensor-parallel shard / pipeline stage of it; what each tensor knows about its parallelism; and the
// initialisation that makes a shard equal to the slice of the full tensor.
//
// Layer-major units: the embedding, then each decoder layer's unit(s), then the head (final norm and,
// untied, lm_head). Each unit is one contiguous range of the flat buffer, so a DP bucket is a run of units
// and a ZeRO shard is made of a part of every unit (ARCHITECTURE.md §3). A layer's tensors are DECLARED by the
// parts that use them (LayoutBuilder): the block its two norms, the attention core q/k/v/o, the MLP core
// gate/up/down — or a MoE core a router and experts, in a unit of their own with their own reduce group.
// Layers a pipeline stage does not hold keep their units, with no tensors (ParamUnit::present() is false),
// so unit ids agree across stages.
//
// Each tensor records its parallelism as axes of the grid (grid.hpp):
//   sharded_on       the axes whose ranks hold DIFFERENT parts of it (tp for the split matrices, pp for
//                    every tensor of a stage; a MoE core adds ep for its experts)
//   grad_summed_on   the axes whose ranks each compute a PARTIAL gradient of the same part, which must be
//                    summed (dp and cp: other tokens; tp for the norms under sequence parallelism, which
//                    see 1/tp of the tokens; pp for a tied embedding's replica on the last stage)
// From those two, every layout knows which rank counts an element in the global gradient norm
// (counts_in_grad_norm), and a data-parallel or ZeRO hook knows the group to reduce a unit over.
// Tensor parallelism: each part declares its tensors with their kind (Split: column-parallel q/k/v/gate/up,
// row-parallel o/down, vocab-parallel embedding and lm_head, replicated norms); the layout's ShardingPlan
// says which part of each kind a tp rank holds (chapter 04's MegatronSharding; padding rows are zero).
//
// Playbook: "Tensor parallelism", "Pipeline parallelism", "ZeRO" (flat buffers), "5D parallelism",
// ARCHITECTURE.md §6 (init). Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*layout*'`.
#pragma once
#include <string>
#include <vector>

#include "model_config.hpp"
#include "tensor.hpp"

namespace penta {

class AttentionCore;
class MlpCore;
struct GridCoords;

// The axes of the parallel grid as bits (grid.hpp): data, context, tensor, pipeline, expert.
enum Axis : uint8_t { kAxisDP = 1, kAxisCP = 2, kAxisTP = 4, kAxisPP = 8, kAxisEP = 16 };
using Axes = uint8_t;
std::string axes_str(Axes a);  // "dp|cp", "-" for none

// A run of decoder layers [begin, end) that a pipeline stage runs as one piece: a model chunk.
struct LayerRange {
    int64_t begin = 0, end = 0;
};

// What a pipeline stage builds: the layers [layer_begin, layer_end) (layer_end = -1: the last layer) and, for
// the schedules that give a rank several model chunks (interleaved 1F1B: v of them; DualPipe: one per
// direction), further disjoint layer ranges, chunks 1, 2, ... Every chunk is one forward / backward pass of its
// own (Model::forward's chunk). The embedding is run by the chunk that starts at layer 0, the head by the one
// that ends at the last layer. A tied model's stage that has the head but not the embedding still holds the
// embedding table (a replica, in the embedding unit) for its lm_head.
struct PipelineSlice {
    int64_t layer_begin = 0;
    int64_t layer_end = -1;
    bool has_embedding = true;
    bool has_head = true;
    std::vector<LayerRange> more_chunks{};  // chunks 1, 2, ... (non-empty, disjoint from every other chunk)
    // DualPipe keeps two copies of the model: stage s and its mirror p-1-s hold the same layers (s's chunks
    // are the mirror's in the other direction), so every tensor's gradient is summed over the two (pp), and
    // the replica's copy is not counted in the gradient norm (the primary's is)
    enum class Mirror : uint8_t { none, primary, replica } mirror = Mirror::none;

    int chunks() const { return 1 + (int)more_chunks.size(); }
    LayerRange chunk(int c) const { return c == 0 ? LayerRange{layer_begin, layer_end} : more_chunks.at(c - 1); }
    bool holds_layer(int64_t layer) const;
    // the chunk that runs the embedding / the head (n_layers: the model's); -1 when this stage has none
    int embedding_chunk() const;
    int head_chunk(int64_t n_layers) const;
};

// What a tensor is to tensor parallelism: the kind of layer it belongs to, as the part that declares it
// says (AttentionCore::declare, DenseSwiGLU::declare, the embedding and lm_head in ParamLayout::build).
// Which part of it each tp rank holds is the sharding plan's rule for that kind (ShardingPlan below);
// chapter 04 names the kinds as Megatron-LM does: ColumnParallelLinear, RowParallelLinear,
// VocabParallelEmbedding (04_tensor_parallel/parallel_layers.hpp).
enum class Split : uint8_t {
    replicated,  // every tp rank holds all of it (the norms, a MoE router)
    column,      // a column-parallel linear's W (out, in): q/k/v, gate/up
    row,         // a row-parallel linear's W (out, in): o_proj, down_proj
    vocab,       // a vocab-parallel table (vocab, h): the embedding, lm_head
};

// The part of a tensor one tp rank holds: its shape and where it sits in the full tensor.
struct TensorShard {
    Shape shape;
    int64_t row0 = 0, col0 = 0;
};

// How tp cuts each kind of tensor: the layout asks it once per tensor, and once for the vocabulary's rows
// (ParamLayout::vocab_rows / vocab_start). Two implementations: WholeTensors (tp 1, the default) and
// chapter 04's MegatronSharding.
struct ShardingPlan {
    virtual ~ShardingPlan() = default;
    // rank `rank` of `tp`'s part of the tensor `name` of shape `full` declared as `split`; throws naming
    // the tensor when tp cannot cut it
    virtual TensorShard shard(const std::string& name, Split split, const Shape& full, int tp, int rank) const = 0;
};

// Every tensor whole on every rank: the plan of a model without tensor parallelism (tp 1 only).
struct WholeTensors : ShardingPlan {
    TensorShard shard(const std::string& name, Split split, const Shape& full, int tp, int rank) const override;
};
const ShardingPlan& whole_tensors();

struct ParamTensor {
    std::string name;    // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
    std::string role;    // the name inside its layer ("self_attn.q_proj.weight"); the full name elsewhere
    int unit = 0;        // the unit that holds it
    int64_t offset = 0;  // first element in the flat buffer
    Shape shape;         // this rank's shard
    Shape full_shape;    // the whole tensor (vocab not padded)
    Split split = Split::replicated;
    int64_t row0 = 0, col0 = 0;  // where the shard sits in the full tensor
    bool decay = true;           // AdamW weight decay (matrices yes, norm weights no)
    float init_std = 0;          // 0: a norm weight, initialised to 1
    Axes sharded_on = kAxisPP;                  // see the file comment
    Axes grad_summed_on = kAxisDP | kAxisCP;    // see the file comment
    int64_t numel() const { return shape.size() == 1 ? shape[0] : shape[0] * shape[1]; }
};

struct ParamUnit {
    std::string name;  // "embedding", "layer 3", "head"
    int64_t layer = -1;  // the decoder layer it belongs to; -1: embedding or head
    int64_t offset = 0, numel = 0;
    std::vector<int> tensors;  // indices into ParamLayout::tensors, in flat-buffer order
    Axes grad_summed_on = kAxisDP | kAxisCP;  // the data axes its gradients are reduced over (experts: edp)
    Axes sharded_on = 0;  // axes that cut every tensor of the unit beyond their own split (experts: ep)
    bool present() const { return !tensors.empty(); }
};

// What shapes the layout besides the model: the tensor-parallel shard, sequence parallelism (the norms'
// gradients become partial sums over tp), the pipeline stage; and whether it is the whole model.
struct LayoutOptions {
    int tp = 1, tp_rank = 0;
    bool sequence_parallel = false;
    PipelineSlice slice;
    // how tp cuts each tensor (nullptr: whole_tensors(), tp 1 only); chapter 04's tensor_parallel_options
    // sets MegatronSharding
    const ShardingPlan* sharding = nullptr;
    // every tensor any rank holds, as a checkpoint names them: a core that gives each rank only some of a
    // layer's tensors (chapter 08's experts, E/ep per ep rank) declares all of them (ParamLayout::whole)
    bool whole = false;
};

struct ParamLayout {
    std::vector<ParamTensor> tensors;
    std::vector<ParamUnit> units;  // indexed by unit id, in flat-buffer order
    int64_t numel = 0;             // length of the flat buffer
    int tp = 1, tp_rank = 0;
    PipelineSlice slice;      // layer_end resolved
    int64_t vocab_rows = 0;   // embedding / lm_head rows held here (padded vocab / tp)
    int64_t vocab_start = 0;  // first vocab id held here

    // Throws naming the rule when tp does not divide heads, kv heads or ffn, or the slice is out of range.
    // The cores declare their layer tensors (nullptr: the Llama defaults, GQA attention and dense SwiGLU).
    static ParamLayout build(const LlamaConfig& cfg, const LayoutOptions& opt, const AttentionCore* attention = nullptr,
                             const MlpCore* mlp = nullptr);
    static ParamLayout build(const LlamaConfig& cfg, int tp = 1, int tp_rank = 0, PipelineSlice slice = {},
                             const ShardingPlan* sharding = nullptr);
    // The whole model the cores make up, whatever part of it this rank holds: tp 1, every layer, every expert.
    // A Hugging Face folder is checked against it and exported as it; each rank's own layout names the same
    // tensors (or their tp slices), so a tensor's global name and shape are the same on every rank.
    static ParamLayout whole(const LlamaConfig& cfg, const AttentionCore* attention = nullptr,
                             const MlpCore* mlp = nullptr);
    int embedding_unit() const { return 0; }
    int head_unit() const { return (int)units.size() - 1; }
    int layer_unit(int64_t layer) const { return layer_units.at(layer).front(); }  // the layer's own unit
    std::vector<std::vector<int>> layer_units;  // per decoder layer: its unit, then any a core added
    const ParamTensor& find(const std::string& name) const;  // throws naming the missing tensor
    // the tensor of `unit` with this role; -1 when there is none
    int find_in_unit(int unit, const std::string& role) const;
};

// How the parts of a layer declare their tensors (ParamLayout::build calls it; the cores' declare() use it).
// Tensors go into the unit begun last; a core may begin a unit of its own inside a layer (experts with
// another reduce group), which takes the tensors until its end_unit. Offsets are assigned once every unit
// is known, unit after unit, so each unit stays one contiguous range. In a layer the pipeline stage does
// not hold, units are created empty and add() keeps nothing.
class LayoutBuilder {
   public:
    LayoutBuilder(ParamLayout& layout, const LlamaConfig& cfg, const LayoutOptions& opt);
    const LlamaConfig& config() const { return cfg_; }
    int64_t layer() const { return layer_; }  // the layer being declared; -1 outside layers
    bool whole() const { return opt_.whole; }  // declaring the whole model (LayoutOptions::whole)
    const ShardingPlan& plan() const;  // how tp cuts each tensor (LayoutOptions::sharding)

    // begins a unit; layer: the decoder layer it belongs to (-1: embedding or head); held: false for a
    // layer this stage does not build (the unit stays empty); grad_summed_on: the data axes its gradients
    // are summed over; sharded_on: axes that cut every tensor added to it (a MoE core's experts: ep)
    int begin_unit(const std::string& name, int64_t layer, bool held = true, Axes grad_summed_on = kAxisDP | kAxisCP,
                   Axes sharded_on = 0);
    void end_unit();
    // One tensor of the current unit, of the kind `split`: the layout's sharding plan cuts it over tp.
    // role: its name inside the layer (the HF name is "model.layers.<i>." + role), or the full name
    // outside layers. Returns its index, or -1 when the unit is not held.
    int add(const std::string& role, Shape full, Split split, float init_std);
    ParamTensor& tensor(int index) { return L_.tensors.at(index); }  // to refine what add() recorded
    // assigns offsets; the layout is complete afterwards
    void finish();

   private:
    ParamLayout& L_;
    const LlamaConfig& cfg_;
    LayoutOptions opt_;
    int64_t layer_ = -1;
    std::vector<int> open_;     // units begun and not ended, innermost last
    std::vector<bool> held_;    // per unit
};

// Does this rank count the tensor's gradient in the global norm? Of all ranks holding the same final
// gradient values, exactly one does: coordinate 0 on every axis the tensor is not sharded on. Axes in
// optimizer_sharded are sharded too (ZeRO: each dp rank updates and holds only its part). A tensor sharded
// on ep is replicated over edp, not over dp and cp. Summing the counted squares over every rank (one
// all-reduce) then gives the global norm, whatever the layout.
bool counts_in_grad_norm(const ParamTensor& t, const GridCoords& c, Axes optimizer_sharded = 0);

// Fills the flat parameter buffer (any device, any float dtype): matrices std * N(0, 1) from the counter
// RNG keyed by (seed, name_stream(HF name), global element index), norms 1, vocab padding 0. Computed in
// f32 on the CPU so every device and layout gets the same bits, then converted to the buffer's dtype.
void init_params(const ParamLayout& layout, uint64_t seed, Tensor& flat);
// flat (any device, any float dtype) <- host (f32 on the CPU, as many elements), converted; nothing when
// they are the same buffer. How init_params and a checkpoint's loader hand their values over.
void store_params(const Tensor& host, Tensor& flat);

}  // namespace penta
