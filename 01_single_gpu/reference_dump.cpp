// reference_dump.cpp — see reference_dump.hpp.
#include "reference_dump.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/optim.hpp"
#include "../common/train_loop.hpp"  // adamw_config
#include "../common/training_step.hpp"

namespace penta {

namespace {

template <class T>
void write_bin(const std::string& path, const std::vector<T>& v) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) FAIL("--dump-reference: cannot write %s: %s", path.c_str(), std::strerror(errno));
    size_t n = std::fwrite(v.data(), sizeof(T), v.size(), f);
    bool ok = std::fclose(f) == 0 && n == v.size();
    CHECK(ok, "--dump-reference: short write to %s", path.c_str());
}

}  // namespace

void dump_reference(Model& model, const Dataset& data, const TrainConfig& cfg, const std::string& dir,
                    const char* checker) {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        FAIL("--dump-reference %s: cannot create the directory: %s", dir.c_str(), std::strerror(errno));
    const LlamaConfig& c = model.config();
    const int64_t B = cfg.micro_batch, T = cfg.seq, steps = 5;
    Batch batch = load_batch(data, 0, B, T);
    DeviceBatch db = to_device(batch, 0, B, model.device());
    double tokens = (double)count_targets(batch);

    write_bin(dir + "/params0.bin", model.params().to_host());
    write_bin(dir + "/tokens.bin", batch.tokens);
    write_bin(dir + "/targets.bin", batch.targets);
    write_bin(dir + "/logits.bin", model.forward_logits(db.tokens, B, T).to_host());
    model.zero_grads();
    double loss = model.forward_backward(db.tokens, db.targets, B, T, tokens);
    write_bin(dir + "/grads.bin", model.grads().to_host());

    // a constant learning rate keeps the comparison about the optimizer, not the schedule
    const AdamWConfig acfg = adamw_config(cfg);
    nlohmann::json tensors = nlohmann::json::array();
    for (const ParamTensor& t : model.tensors())
        tensors.push_back({{"name", t.name}, {"offset", t.offset}, {"shape", t.shape}, {"decay", t.decay}});
    AdamW optim(model.params(), model.grads(), optimizer_ranges(model), acfg);
    std::vector<double> losses;
    for (int64_t s = 0; s < steps; s++) {
        model.zero_grads();
        losses.push_back(model.forward_backward(db.tokens, db.targets, B, T, tokens));
        optim.step(cfg.lr, cfg.grad_clip);
    }
    write_bin(dir + "/params5.bin", model.params().to_host());

    nlohmann::json meta = {
        {"config",
         {{"vocab", c.vocab}, {"hidden", c.hidden}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads}, {"ffn", c.ffn}, {"rope_theta", c.rope_theta}, {"norm_eps", c.norm_eps},
          {"tied_embeddings", c.tied_embeddings}}},
        {"B", B}, {"T", T}, {"global_tokens", tokens}, {"loss", loss}, {"steps", steps}, {"step_losses", losses},
        {"adamw",
         {{"lr", cfg.lr}, {"beta1", cfg.beta1}, {"beta2", cfg.beta2}, {"eps", acfg.eps},
          {"weight_decay", cfg.weight_decay}, {"grad_clip", cfg.grad_clip}}},
        {"tensors", tensors}};
    std::ofstream(dir + "/meta.json") << meta.dump(1) << "\n";
    std::printf("wrote the reference dump to %s (%zu tensors, batch %ld x %ld, loss %.6f); check it with\n"
                "  /usr/bin/python3 %s %s\n",
                dir.c_str(), model.tensors().size(), (long)B, (long)T, loss, checker, dir.c_str());
}

}  // namespace penta
