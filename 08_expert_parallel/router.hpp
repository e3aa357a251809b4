// router.hpp — the MoE router and its load balancing: which k of the E experts each token goes to, with
// which weights, and the two ways of keeping the experts evenly loaded.
//
// Playbook: "Expert parallelism". The router is one linear map (E, h) of the normalised token:
//   logits = x W_r^T (N, E);  scores = softmax(logits) (Mixtral) or sigmoid(logits) (DeepSeek-V3);
//   experts = top-k of scores + bias;  weights = the chosen scores / their sum (Mixtral renormalises) or the
//   scores themselves (DeepSeekMoE)
// The ops are ops.hpp's moe_router_forward / backward (CPU and CUDA). Left alone, a router collapses onto a few
// experts: they get the tokens, learn faster, and get more tokens. Two remedies:
//   aux   the Switch/GShard balance loss, here per sequence s (DeepSeek-V3's sequence-wise form, so it does
//         not depend on how sequences are spread over ranks and micro-batches):
//           B_s = E / (k T) · sum_e count_{s,e} · P_{s,e},  P_{s,e} = mean over s's T tokens of score_e
//         count_{s,e}: the s's choices that picked e (before any capacity). B_s is 1 when s spreads its k T
//         choices evenly over the experts and grows to E/k when all go to the same k. The loss adds
//           aux_coef · sum_s (n_s / G) · B_s      (n_s: s's target tokens, G: the global batch's)
//         weighted like the language-model loss, so every layout computes the same sum; its gradient flows
//         through P only (the counts are a step function of the scores).
//   bias  DeepSeek-V3's auxiliary-loss-free balancing: a bias b_e is added to the scores for the CHOICE only
//         (never the weights), and after each step b_e += rate · sign(mean load - load_e) over the global
//         batch's choices (balance.hpp): overloaded experts become less attractive, idle ones more.
// Test: `make test CH=08` (tests/08_expert_parallel/test_moe_layer.cpp: gradients by finite differences).
#pragma once
#include <vector>

#include "../common/spine.hpp"

namespace penta {

// What the router keeps of one micro-batch of one layer (N token rows of B sequences).
struct RouterActs {
    Tensor scores;              // (N, E) after softmax / sigmoid
    Tensor experts;             // (N, k) i32, highest first
    Tensor weights;             // (N, k) combine weights
    std::vector<int32_t> experts_host;  // (N k) the same, on the host (the dispatch plan reads it)
    Tensor aux_dscores;         // (B, E) d aux loss / d scores of each sequence's rows; undefined without aux
    double balance = 0;         // sum_s (n_s / G) B_s: the balance score this micro-batch adds (aux loss / coef)
    Tensor d_logits;            // B -> W: d loss / d logits (N, E)
};

class Router {
   public:
    // role: the tensor's name in a layer ("block_sparse_moe.gate.weight" for Mixtral, "mlp.gate.weight" for
    // DeepSeek); aux_coef 0: no balance loss
    Router(const LlamaConfig& cfg, std::string role, double aux_coef);
    const std::string& role() const { return role_; }
    // the (E, h) router, replicated over tp: every tp rank routes the same tokens the same way
    void declare(LayoutBuilder& b) const;
    // x (N, h) -> the choice of every row; bias (E) or undefined; mb's targets weigh the balance loss (absent:
    // no loss, as when only logits are wanted); global_tokens: G
    RouterActs forward(const LayerParams& w, const Tensor& x, const MicroBatch& mb, double global_tokens,
                       const Tensor& bias, Tag saved) const;
    // B: d loss / d logits from d loss / d weights (N, k) (and the balance loss), kept in acts for W;
    // returns nothing: dx_add is ACCUMULATED with d logits W_r when defined (one tp rank adds it: the router
    // is replicated, and the boundary sums the ranks' input gradients)
    void backward_input(const LayerParams& w, RouterActs& acts, const Tensor& d_weights, Tensor* dx_add, Tag keep) const;
    // W: d W_r += d_logits^T x
    void backward_weight(LayerParams& g, const Tensor& x, RouterActs& acts) const;
    double aux_coef() const { return aux_coef_; }

   private:
    int64_t E_, k_, h_;
    bool sigmoid_, normalize_;
    std::string role_;
    double aux_coef_;
};

}  // namespace penta
