// test_vocab_padding.cpp — the last tp shard's vocabulary padding in every format, for vocabularies tp does not
// divide (63 at tp 2, 64 at tp 3: the last shard of the embedding and the head holds 1 and 2 rows past the
// real vocabulary): the Hugging Face export of a tp run is the one-rank export byte for byte (no padding row
// written past its tensor, into the next one's bytes or past the file's end); an export loaded at tp holds
// each rank's block of the one-rank weights with the padding rows 0 (none read from past its tensor); the
// native checkpoint resharded tp 1 -> tp, tp -> tp and tp -> tp 1 gives the same blocks (the padding rows are
// neither needed from a checkpoint that lacks them nor counted when one has them). No PyTorch.
// Playbook: "Tensor parallelism" (vocabulary parallelism). Run: `make test CH=04`, or
//   mpirun -np 3 build/bin/tests_04 -ts='ch04 np3' -tc='*padding*'
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "../../common/checkpoint_load.hpp"
#include "../../common/checkpoint_save.hpp"
#include "../../common/hf_checkpoint.hpp"
#include "../../common/train_loop.hpp"
#include "../../common/training_step.hpp"
#include "../testing.hpp"
#include "tp_testing.hpp"

using namespace penta;
using namespace penta::tp_testing;

namespace {

// what layout L (a tp rank's) holds of the weights w of the unsharded layout full: each tensor's block of rows
// and columns, its rows past the real vocabulary (the padding) 0
std::vector<float> block_of(const ParamLayout& full, const std::vector<float>& w, const ParamLayout& L) {
    std::vector<float> out((size_t)L.numel, 0.0f);
    for (const ParamTensor& t : L.tensors) {
        const ParamTensor& f = full.find(t.name);
        const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
        const int64_t R = t.full_shape[0], C = t.full_shape.size() == 2 ? t.full_shape[1] : 1;
        const int64_t col0 = t.shape.size() == 2 ? t.col0 : 0;
        for (int64_t r = 0; r < rows && t.row0 + r < R; r++)
            for (int64_t c = 0; c < cols; c++) out[t.offset + r * cols + c] = w[f.offset + (t.row0 + r) * C + col0 + c];
    }
    return out;
}

std::string bytes_of(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

CheckpointContext context(const LlamaConfig& cfg, const GridShape& shape) {
    CheckpointContext c;
    c.model = cfg;
    c.shape = shape;
    c.global_batch = 4, c.seq = 8, c.seed = (int64_t)kModelSeed, c.data = "random tokens";
    c.lr = LRSchedule{kAdamW.lr, kAdamW.lr, 0, 10};
    c.adamw = kAdamW;
    return c;
}

// saves model (with a fresh AdamW) at step 1 into dir; returns the step's folder
std::string save(Model& model, ParallelGrid& grid, const std::string& dir) {
    std::unique_ptr<AdamW> optim = make_adamw(model, kAdamW, &grid);
    Checkpointer ck(CheckpointOptions{dir, 1, 24, 0, false}, model, *optim, context(model.config(), grid.shape()),
                    grid.coords(), &grid.world());
    ck.after_step(1, 0.01, false);
    ck.finish();
    grid.world().barrier();  // rank 0 commits (metadata.json) last: every rank reads after it
    return dir + "/step_000001";
}

// a fresh model of grid's layout (another seed) with the checkpoint in step_dir loaded; its weights
std::vector<float> resumed(const LlamaConfig& cfg, ParallelGrid& grid, const ModelOptions& o, const std::string& step_dir) {
    Model m(cfg, Device::cpu, kModelSeed + 100, o);
    std::unique_ptr<AdamW> optim = make_adamw(m, kAdamW, &grid);
    load_checkpoint(step_dir, m, *optim, context(cfg, grid.shape()));
    return m.params().to_host();
}

// the world as tp t (every rank a shard) and as dp t (every rank the whole model; dp rank 0 writes the exports
// and the checkpoint's pieces: the one-rank files)
void check_vocab_padding_formats(const LlamaConfig& cfg, int t) {
    const int64_t V = cfg.vocab, rows = (V + t - 1) / t;
    CAPTURE(V);
    CAPTURE(cfg.tied_embeddings);
    REQUIRE(rows * t > V);  // the last shard holds padding rows
    ParallelGrid tp = tp_grid(cfg, t);
    ParallelGrid one(make_world_comm(CommBackend::mpi), GridShape{t, 1, 1, 1}, &cfg);
    Comm& world = tp.world();
    const std::string base = strfmt("/tmp/penta_vocab_pad_%ld_%ld%s", (long)world.all_reduce_scalar(world.rank() ? 0 : getpid()),
                                    (long)V, cfg.tied_embeddings ? "_tied" : "");
    ModelOptions o;
    o = tensor_parallel_options(o, tp.tp());
    Model whole(cfg, Device::cpu, kModelSeed), shard(cfg, Device::cpu, kModelSeed, o);
    const std::vector<float> w = whole.params().to_host();
    const std::vector<float> want = block_of(whole.layout(), w, shard.layout());
    REQUIRE(shard.params().to_host() == want);  // the initialisation is a function of the global position

    // Hugging Face: the tp export is the one-rank export, byte for byte
    export_hf(whole, base + "_hf_one", one.coords(), &one.world());
    export_hf(shard, base + "_hf_tp", tp.coords(), &world);
    if (world.rank() == 0) {
        const std::string a = bytes_of(base + "_hf_one/model.safetensors"), b = bytes_of(base + "_hf_tp/model.safetensors");
        CHECK(a.size() > 0);
        CHECK_MESSAGE(a.size() == b.size(), "tp " << t << " export: " << b.size() << " bytes, one rank's " << a.size());
        CHECK_MESSAGE(a == b, "tp " << t << " export differs from the one-rank export");
        CHECK(bytes_of(base + "_hf_one/config.json") == bytes_of(base + "_hf_tp/config.json"));
    }
    world.barrier();
    {  // the one-rank export loaded at tp: this rank's block, padding rows 0
        ModelOptions lo = o;
        lo.weights = std::make_shared<HfCheckpoint>(base + "_hf_one");
        Model loaded(resolve_model(base + "_hf_one"), Device::cpu, kModelSeed + 100, lo);
        CHECK(loaded.params().to_host() == want);
    }

    // native checkpoints resharded: tp 1 -> tp, tp -> tp, tp -> tp 1
    const std::string ck_one = save(whole, one, base + "_ck_one"), ck_tp = save(shard, tp, base + "_ck_tp");
    CHECK(resumed(cfg, tp, o, ck_one) == want);
    CHECK(resumed(cfg, tp, o, ck_tp) == want);
    CHECK(resumed(cfg, one, ModelOptions{}, ck_tp) == w);
    world.barrier();
    if (world.rank() == 0 && !std::getenv("PENTA_KEEP"))
        std::system(("rm -rf '" + base + "_hf_one' '" + base + "_hf_tp' '" + base + "_ck_one' '" + base + "_ck_tp'").c_str());
    world.barrier();
}

}  // namespace

TEST_SUITE("ch04 np2") {
    TEST_CASE("vocab padding at tp 2 (vocab 63): HF export byte for byte, HF load and checkpoint reshards equal one rank's") {
        check_vocab_padding_formats(tp_config(63), 2);
        check_vocab_padding_formats(tp_config(63, true), 2);
    }
}

TEST_SUITE("ch04 np3") {
    TEST_CASE("vocab padding at tp 3 (vocab 64): HF export byte for byte, HF load and checkpoint reshards equal one rank's") {
        check_vocab_padding_formats(tp3_config(64), 3);
    }
}
