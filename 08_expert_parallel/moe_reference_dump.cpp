// moe_reference_dump.cpp — chapter 01's reference dump plus moe.json (moe_reference_dump.hpp).
// Playbook: "Expert parallelism". Test: `make test CH=08`.
#include "moe_reference_dump.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/training_step.hpp"

namespace penta {

void dump_moe_reference(Model& model, MoeLayer& moe, const Dataset& data, const TrainConfig& cfg,
                        const std::string& dir) {
    CHECK(moe.ep() == 1 && model.options().tp == 1, "--dump-reference: the dump is of the whole model on one rank "
          "(--dp 1 --ep 1 --tp 1, mpirun -np 1)");
    CHECK(moe.options().capacity_factor == 0, "--dump-reference: Mixtral's block drops nothing; dump without "
          "--moe-capacity");
    // the balance loss at the initial weights, on the batch the dump uses (dump_reference's: sample 0 on)
    const Batch batch = load_batch(data, 0, cfg.micro_batch, cfg.seq);
    const DeviceBatch db = to_device(batch, 0, cfg.micro_batch, model.device());
    const double aux = model.forward(MicroBatch::whole(db.tokens, db.targets, cfg.micro_batch, cfg.seq),
                                     (double)count_targets(batch)).aux_loss;
    // every forward of the dump from here: the logits, the gradients, then one per AdamW step
    std::vector<std::vector<int32_t>> routing;
    moe.log_routing(&routing);
    dump_reference(model, data, cfg, dir, "tools/torch_moe.py");  // creates dir
    moe.log_routing(nullptr);
    const int64_t layers = model.config().n_layers - model.config().moe.first_dense, forwards = routing.size() / layers;
    CHECK(forwards == 7 && (int64_t)routing.size() == forwards * layers,
          "--dump-reference: %zu MoE layer forwards logged, expected 7 of %lld layers (logits, gradients, 5 steps): "
          "chapter 01's dump changed its order", routing.size(), (long long)layers);
    std::ofstream bin(dir + "/routing.bin", std::ios::binary);
    for (const std::vector<int32_t>& r : routing) bin.write((const char*)r.data(), r.size() * sizeof(int32_t));
    CHECK(bin.good(), "--dump-reference: cannot write %s/routing.bin", dir.c_str());
    const MoeConfig& m = model.config().moe;
    const nlohmann::json j = {{"experts", m.experts}, {"top_k", m.top_k}, {"expert_ffn", m.expert_ffn},
                              {"shared_experts", m.shared_experts}, {"first_dense", m.first_dense},
                              {"sigmoid_scores", m.sigmoid_scores}, {"norm_topk", m.norm_topk},
                              {"naming", moe_naming_name(m.naming)}, {"aux_coef", moe.has_aux_loss() ? moe.options().aux_coef : 0.0},
                              {"aux_loss", aux},
                              // routing.bin's forwards: 0 the logits, 1 the gradients, 2 + s AdamW step s
                              {"routing_forwards", forwards}};
    std::ofstream(dir + "/moe.json") << j.dump(1) << "\n";
}

}  // namespace penta
