// test_hf_tp.cpp — Hugging Face checkpoints in parallel layouts: a random LlamaForCausalLM that transformers
// saved, loaded at tp2 (each rank reading its shards of q/k/v/o, gate/up/down and the vocab rows) and at
// tp2 × pp2 (two pipeline stages on each rank, each loading only its layers, chained), gives transformers'
// logits and loss to 1e-5; a tp2 run, one AdamW step on, exported with --export-hf's export_hf, loads in
// transformers with the same logits as ours.
//   mpirun -np 2 build/bin/tests_04 -ts='ch04 np2' -tc='*Hugging Face*'
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "../../04_tensor_parallel/tp_install.hpp"
#include "../../common/hf_checkpoint.hpp"
#include "../../common/train_loop.hpp"
#include "../01_single_gpu/hf_testing.hpp"
#include "tp_testing.hpp"

using namespace penta;
using namespace penta::hf_testing;

namespace {

// a tp shard (and maybe a pipeline stage) of dir's model, with chapter 04's boundary and loss
struct TpModel {
    TpModel(const std::string& dir, ParallelGrid& grid, PipelineSlice slice = {}) {
        ModelOptions o = tensor_parallel_options(ModelOptions{}, grid.tp());
        o.slice = slice;
        o.weights = std::make_shared<HfCheckpoint>(dir);
        model = std::make_unique<Model>(resolve_model(dir), Device::cpu, 1, o);
        seams = install_tensor_parallel(*model, grid.tp());
    }
    std::unique_ptr<Model> model;
    TensorParallelSeams seams;
};

}  // namespace

TEST_SUITE("ch04 np2") {

TEST_CASE("Hugging Face checkpoints at tp2 and tp2 x pp2 match transformers; a tp2 run's export loads in transformers") {
    ParallelGrid grid(make_world_comm(CommBackend::mpi), GridShape{1, 1, 1, 2});
    Comm& world = grid.world();
    std::string why, py = world.rank() == 0 ? python_with_hf(&why) : "";
    if (world.all_reduce_scalar(py.empty() ? 0.0 : 1.0) == 0) SKIP_TEST(why.empty() ? "no transformers on rank 0" : why);
    const std::string base = "/tmp/penta_hf_tp_" + std::to_string((long)world.all_reduce_scalar(world.rank() ? 0 : getpid()));
    HfSpec tied, untied;
    tied.tied = true, tied.llama3 = true, tied.shard_kb = 20;
    untied.llama3 = true;
    for (const HfSpec& spec : {tied, untied}) {
        CAPTURE(spec.str());
        const std::string dir = base + "_model";
        bool made = world.rank() != 0 || make_hf_model(py, dir, spec);
        REQUIRE(world.all_reduce_scalar(made ? 0.0 : 1.0) == 0);  // every rank waits for rank 0's files
        const HfReference ref = read_hf_reference(dir);
        const int64_t B = ref.B, T = ref.T, L = resolve_model(dir).n_layers;
        Tensor tokens = Tensor::from_host_i32(ref.tokens, {B * T}, Device::cpu);
        Tensor targets = Tensor::from_host_i32(ref.targets, {B * T}, Device::cpu);
        const int64_t V = resolve_model(dir).vocab;

        // tp2
        TpModel tp(dir, grid);
        CHECK(tp.model->n_params() < resolve_model(dir).n_params());  // a shard
        check_close_scaled(gather_vocab_logits(grid.tp(), tp.model->forward_logits(tokens, B, T), V).to_host(), ref.logits,
                           1e-5, "tp2 logits");
        const double loss = tp.model->forward_loss(tokens, targets, B, T, (double)ref.counted());
        CHECK_MESSAGE(std::fabs(loss - ref.loss) <= 1e-5 * ref.loss, "tp2 loss " << loss << ", transformers' " << ref.loss);

        // tp2 x pp2: the stages chained on each rank, each holding (and reading) only its layers
        TpModel first(dir, grid, {0, L / 2, true, false}), last(dir, grid, {L / 2, L, false, true});
        for (const ParamTensor& t : first.model->tensors()) CHECK(t.name.find("layers." + std::to_string(L / 2)) == std::string::npos);
        Tensor h = first.model->forward_logits(tokens, B, T);  // (B T, hidden): the first stage's output
        check_close_scaled(gather_vocab_logits(grid.tp(), last.model->forward_logits(tokens, B, T, h), V).to_host(),
                           ref.logits, 1e-5, "tp2 x pp2 logits");
        MicroBatchActs a = last.model->forward(MicroBatch::whole(tokens, targets, B, T), (double)ref.counted(), h);
        CHECK_MESSAGE(std::fabs(a.loss - ref.loss) <= 1e-5 * ref.loss, "tp2 x pp2 loss " << a.loss << ", transformers' " << ref.loss);
    }

    // a tp2 run (one AdamW step on random tokens) exported, then loaded by transformers
    const std::string dir = base + "_model", out = base + "_export";
    TpModel tp(dir, grid);
    std::unique_ptr<AdamW> optim = make_adamw(*tp.model, AdamWConfig{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f}, &grid);
    Trainer trainer{*tp.model, *optim};
    BatchPlan plan;
    plan.seq = 16, plan.micro_batch = 2, plan.global_batch = 2;
    tp_testing::RandomTokens data((int32_t)tp.model->config().vocab);
    training_step(trainer, data, 0, plan, 1e-2f, 1.0f);
    export_hf(*tp.model, out, grid.coords(), &world, dir);
    const HfReference ref = read_hf_reference(dir);
    Tensor tokens = Tensor::from_host_i32(ref.tokens, {ref.B * ref.T}, Device::cpu);
    const std::vector<float> logits =
        gather_vocab_logits(grid.tp(), tp.model->forward_logits(tokens, ref.B, ref.T), tp.model->config().vocab).to_host();
    if (world.rank() == 0) {
        CHECK(std::ifstream(out + "/generation_config.json").good());  // the source folder's files came along
        write_logits(out + "/ours.safetensors", ref.tokens, ref.B, ref.T, logits);
        CHECK_MESSAGE(transformers_agrees(py, out, out + "/ours.safetensors"),
                      "transformers' logits of the exported tp2 model differ from ours");
        if (!std::getenv("PENTA_KEEP")) std::system(("rm -rf '" + dir + "' '" + out + "'").c_str());
    }
    world.barrier();
}

}  // TEST_SUITE
