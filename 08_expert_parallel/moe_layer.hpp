// moe_layer.hpp — the mixture-of-experts MLP: chapter 08's MlpCore, the one piece of the model it replaces.
//
// Playbook: "Expert parallelism". For a token x (normalised, h wide) of a MoE layer:
//   experts, weights = Router(x)                       top-k of E (router.hpp)
//   y = sum_j weights_j · SwiGLU_{experts_j}(x)  (+ SwiGLU_shared(x) when the model has shared experts)
// Mixtral's block as transformers writes it (MixtralSparseMoeBlock), checked against PyTorch by
// tools/torch_moe.py. With ep ranks, rank q holds experts [q·E/ep, (q+1)·E/ep) in a unit of its own
// (sharded over ep, its gradients summed over edp: reduce_groups.hpp) — the whole model's layout
// (ParamLayout::whole, what a Hugging Face folder is checked and exported as) declares all E — and forward is
//   route -> plan (capacity, dispatch_plan.hpp) -> counts all-to-all -> dispatch all-to-all-v
//        -> each local expert on its rows -> combine all-to-all-v -> weighted sum per token
// (expert_dispatch.hpp); backward mirrors it: d weights and the d outputs' all-to-all, the experts' input
// gradients back, the router's gradient. The router and the shared experts stay in the layer's own unit
// (replicated over ep, summed over dp like the attention).
// Under tensor parallelism every expert is cut like the dense MLP (gate/up rows, down columns): its output is
// a partial sum that the boundary's g all-reduces, so the combine weights' gradient (dy · expert output) is a
// partial sum too and is all-reduced over tp; the router, replicated, adds its input gradient on one tp rank.
// Layers before moe.first_dense stay dense (DeepSeekMoE's first layer).
// Run: `mpirun -np 4 build/bin/08_expert_parallel --dp 4 --ep 4`. Test: `make test CH=08`.
#pragma once
#include <memory>
#include <vector>

#include "../common/spine.hpp"
#include "dispatch_plan.hpp"
#include "expert_dispatch.hpp"
#include "router.hpp"

namespace penta {

enum class MoeBalance : uint8_t { none, aux, bias };
MoeBalance parse_moe_balance(const std::string& flag_value);  // none | aux | bias; the error names --moe-balance
const char* moe_balance_name(MoeBalance b);

// How a MoE layer trains (the model's shape is LlamaConfig::moe).
struct MoeOptions {
    MoeBalance balance = MoeBalance::aux;
    double aux_coef = 0.01;        // --moe-aux-coef: the balance loss's weight (with balance aux)
    double bias_rate = 1e-3;       // --moe-bias-rate: DeepSeek-V3's update speed gamma (with balance bias)
    double capacity_factor = 0;    // --moe-capacity: copies per expert and sequence = ceil(cf k T / E); 0: none
};

// what a layer with these options has that transformers' MixtralForCausalLM cannot hold ("": nothing); the
// layer's hf_export_gap, and chapter 08's start-up refusal of --export-hf
std::string moe_hf_export_gap(const MoeOptions& o);

// What one layer's routing did over the micro-batches recorded since reset_stats (each training
// micro-batch once, when its backward runs), on this rank.
struct MoeLayerStats {
    std::vector<double> routed;  // (E) choices per expert, before the capacity
    std::vector<double> kept;    // (E) copies the experts computed
    std::vector<double> sent;    // (ep) copies sent to each ep rank (its own included)
    double balance = 0;          // sum over micro-batches of the router's balance score (aux loss / coef)
    int64_t micro_batches = 0;
};

class MoeLayer : public MlpCore {
   public:
    // ep: the expert-parallel group (nullptr: every expert on this rank); tp: the tensor-parallel group the
    // experts are cut over (nullptr: none). device: where the balancing bias lives.
    MoeLayer(const LlamaConfig& cfg, const MoeOptions& opt, Device device, Comm* ep = nullptr, Comm* tp = nullptr);

    void declare(LayoutBuilder& b) const override;
    bool has_aux_loss() const override { return router_.aux_coef() > 0; }
    std::string hf_export_gap() const override;
    std::unique_ptr<MlpActs> forward(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb,
                                     double global_tokens, const Tensor& x, Tensor& y, Tag saved) override;
    Tensor backward_input(const LayerParams& w, MlpActs& acts, const Tensor& dy, Tag keep) override;
    void backward_weight(LayerParams& g, const Tensor& x, MlpActs& acts) override;

    const LlamaConfig& config() const { return cfg_; }
    Device device() const { return device_; }
    const MoeOptions& options() const { return opt_; }
    int ep() const { return dispatch_.group().size(); }
    int experts_per_rank() const { return dispatch_.experts_per_rank(); }
    int first_expert() const { return dispatch_.first_expert(); }
    Comm& ep_group() { return dispatch_.group(); }
    // the HF name inside a layer of expert j's matrix ("block_sparse_moe.experts.3.w1.weight")
    std::string expert_role(int64_t j, const std::string& matrix) const;
    const SwiGLUNames& expert_names() const { return names_; }
    const std::string& router_role() const { return router_.role(); }  // "block_sparse_moe.gate.weight"

    // the balancing bias of each layer ((E) f32; undefined for a dense layer or without --moe-balance bias)
    Tensor& bias(int64_t layer) { return bias_.at(layer); }
    const std::vector<MoeLayerStats>& stats() const { return stats_; }  // per layer (dense layers: empty)
    void reset_stats();
    // every forward of a MoE layer appends its choices (N k experts, this rank's tokens) to *log while it is set
    // (the PyTorch check compares its own routing with ours; nullptr: off)
    void log_routing(std::vector<std::vector<int32_t>>* log) { routing_log_ = log; }

   private:
    struct Acts;
    LlamaConfig cfg_;
    MoeOptions opt_;
    Device device_;
    std::unique_ptr<Comm> own_ep_;  // a group of this rank alone when none was given
    ExpertDispatch dispatch_;
    Comm* tp_;
    SwiGLUNames names_;
    std::string prefix_;            // "block_sparse_moe." or "mlp."
    Router router_;
    mutable DenseSwiGLU dense_;     // the dense layers' MLP
    mutable DenseSwiGLU shared_;    // the shared experts, one SwiGLU
    mutable std::vector<DenseSwiGLU> experts_;  // every expert j (this rank uses its own)
    std::vector<Tensor> bias_;
    std::vector<MoeLayerStats> stats_;
    std::vector<std::vector<int32_t>>* routing_log_ = nullptr;
};

}  // namespace penta
