// test_hf_pp.cpp — chapter 07, a Hugging Face checkpoint in a real pipeline: a random LlamaForCausalLM that
// transformers saved (tied, GQA, a llama3 rope_scaling block, sharded; and untied in one file), loaded the way
// chapter 07's program loads --model DIR (PipelineParts: every rank reads only its stage's layers and its tp
// shards) on 4 ranks at tp2 × pp2. One step of the 1F1B executor over the reference batch (one micro-batch per
// sequence) gives transformers' loss to 1e-5 relative on every rank; the first stage's output, sent over the
// pipeline group, gives the last stage transformers' logits to 1e-5 (gathered over its tp pair). Skipped,
// saying why, when transformers cannot be had or PENTA_NO_TORCH=1 hides PyTorch (tools/hf_reference.py makes
// the models).
// Playbook: "Pipeline parallelism". Run: `make test CH=07`, or
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/tests_07 -ts='ch07 np4' -tc='*Hugging Face*'
#include <unistd.h>

#include <cmath>

#include "../../04_tensor_parallel/vocab_parallel.hpp"
#include "../01_single_gpu/hf_testing.hpp"
#include "../01_single_gpu/torch_testing.hpp"
#include "pp_testing.hpp"

using namespace penta;
using namespace penta::hf_testing;

TEST_SUITE("ch07 np4") {

TEST_CASE("a Hugging Face checkpoint through the pipeline at tp2 x pp2: transformers' loss and, on the last stage, its logits") {
    ParallelGrid grid(make_world_comm(CommBackend::mpi), GridShape{1, 2, 1, 2});
    Comm& world = grid.world();
    // PENTA_NO_TORCH=1 (the mutation harness) hides PyTorch, and with it transformers
    std::string why, py = world.rank() == 0 && !testing::python_with_torch().empty() ? python_with_hf(&why) : "";
    if (world.all_reduce_scalar(py.empty() ? 0.0 : 1.0) == 0) SKIP_TEST(why.empty() ? "no transformers on rank 0" : why);
    const std::string dir =
        "/tmp/penta_hf_pp_" + std::to_string((long)world.all_reduce_scalar(world.rank() ? 0 : getpid())) + "_model";
    HfSpec tied, untied;
    tied.tied = true, tied.llama3 = true, tied.shard_kb = 20;
    untied.llama3 = true;
    for (const HfSpec& spec : {tied, untied}) {
        CAPTURE(spec.str());
        const bool made = world.rank() != 0 || make_hf_model(py, dir, spec);
        REQUIRE(world.all_reduce_scalar(made ? 0.0 : 1.0) == 0);  // every rank waits for rank 0's files
        const HfReference ref = read_hf_reference(dir);

        TrainConfig tc;
        tc.model = dir;  // --model DIR: the weights from its safetensors
        tc.pp = 2, tc.tp = 2;
        tc.seq = ref.T, tc.micro_batch = 1, tc.grad_accum = ref.B;
        const LlamaConfig mc = resolve_model(tc);
        PipelineParts parts(tc, PipelineFlags{}, mc, grid, Device::cpu, tp_testing::kAdamW);
        const int stage = grid.coords().pp;
        const int64_t L = mc.n_layers, T = ref.T, V = mc.vocab;
        CHECK(parts.model->n_params() < mc.n_params() / 2);  // a stage's tp shard only
        for (const ParamTensor& t : parts.model->tensors())   // and only its stage's layers
            CHECK(t.name.find("layers." + std::to_string(stage == 0 ? L / 2 : 0) + ".") == std::string::npos);

        // the loss: one pipeline step of 1F1B, one micro-batch per sequence of the reference batch
        std::vector<Tensor> tok, tgt;
        std::vector<MicroBatch> mbs;
        for (int64_t j = 0; j < ref.B; j++) {
            const std::vector<int32_t> a(ref.tokens.begin() + j * T, ref.tokens.begin() + (j + 1) * T),
                b(ref.targets.begin() + j * T, ref.targets.begin() + (j + 1) * T);
            tok.push_back(Tensor::from_host_i32(a, {T}, Device::cpu));
            tgt.push_back(Tensor::from_host_i32(b, {T}, Device::cpu));
            mbs.push_back(MicroBatch::whole(tok.back(), tgt.back(), 1, T, j));
        }
        StepHooks none;
        const ScheduleResult r = parts.executor->run(*parts.model, mbs, (double)ref.counted(), none);
        const double loss = parts.pp->all_reduce_scalar(r.loss);  // the head's stage's, on every rank
        CHECK_MESSAGE(std::fabs(loss - ref.loss) <= 1e-5 * ref.loss,
                      "tp2 x pp2 loss " << loss << " on rank " << world.rank() << ", transformers' " << ref.loss);
        CHECK(parts.executor->last_step().ops.size() == parts.plan.ops[stage].size());

        // the logits: the first stage's output goes to the last stage, which holds the head
        Tensor tokens = Tensor::from_host_i32(ref.tokens, {ref.B * T}, Device::cpu);
        Tensor h;
        if (stage == 0) {
            h = parts.model->forward_logits(tokens, ref.B, T);  // (B T, hidden)
            grid.pp().send(h, 1);
        } else {
            h = Tensor::empty({ref.B * T, mc.hidden}, parts.model->precision().act, Device::cpu, Tag::comm);
            grid.pp().recv(h, 0);
            const std::vector<float> logits =
                gather_vocab_logits(grid.tp(), parts.model->forward_logits(tokens, ref.B, T, h), V).to_host();  // (B T, V)
            REQUIRE(logits.size() == ref.logits.size());
            check_close_scaled(logits, ref.logits, 1e-5, "tp2 x pp2 logits on the last stage, rank " + std::to_string(world.rank()));
        }
        world.barrier();
    }
    if (world.rank() == 0 && !std::getenv("PENTA_KEEP")) std::system(("rm -rf '" + dir + "'").c_str());
    world.barrier();
}

}  // TEST_SUITE
