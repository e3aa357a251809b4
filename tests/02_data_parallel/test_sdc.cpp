// test_sdc.cpp — chapter 02's silent-data-corruption check (sdc_check.hpp): replicas that train normally never
// disagree; one bit flipped on one replica is caught at the next check, which names that rank and the tensor;
// with two replicas it says it cannot tell which one is wrong.
// Seed 003 ("静默数据损坏 ... 副本间比对"). Run: `make test CH=02`, or by hand
//   mpirun -np 3 build/bin/tests_02 -ts='ch02 np3' -tc='SDC*'
#include <cstring>

#include "../../02_data_parallel/data_parallel.hpp"
#include "../../02_data_parallel/sdc_check.hpp"
#include "../../common/runtime.hpp"
#include "../01_single_gpu/equivalence.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr uint64_t kSeed = 5;
const AdamWConfig kAdamW{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};

struct SdcRun {
    int64_t steps_done = 0, checks = 0;
    std::string error;  // "" when no check failed
};

// `steps` steps of data-parallel training of `tiny` on the world's ranks with the check installed
SdcRun run(int64_t steps, SdcOptions opt) {
    auto dp = make_world_comm(CommBackend::mpi);
    LlamaConfig c = preset("tiny");
    c.vocab = kByteVocab;  // the addition task's byte tokens
    auto data = make_dataset("addition", kSeed, (int32_t)c.vocab);
    Model m(c, Device::cpu, kSeed);
    AdamW optim(m.params(), m.grads(), optimizer_ranges(m.layout(), GridCoords{dp->rank()}), kAdamW, false, dp.get());
    DataParallelHooks hooks(m, *dp, {});
    SdcCheck sdc(m, *dp, opt);
    Trainer trainer{m, optim, {&hooks, &sdc}};
    TrainConfig cfg;
    cfg.seq = 16;
    cfg.micro_batch = 2;
    BatchPlan plan = data_parallel_plan(cfg, *dp);
    SdcRun r;
    r.error = error_of([&] {
        for (int64_t s = 0; s < steps; s++) {
            training_step(trainer, *data, s, plan, 1e-3f, 1.0f);
            r.steps_done++;
        }
    });
    r.checks = sdc.checks();
    return r;
}

void replicas_that_train_normally_agree() {
    SdcRun r = run(6, SdcOptions{2});
    CHECK(r.error == "");
    CHECK(r.steps_done == 6);
    CHECK(r.checks == 3);  // after steps 2, 4, 6
}

// the flip after step 3, the checks after even steps: steps 1-3 finish, the check after step 4 fails
void a_flipped_bit_is_caught_and_the_rank_named(int flip_rank) {
    const int K = world_size();
    SdcRun r = run(6, SdcOptions{2, flip_rank, 3});
    INFO("the error: " << r.error);
    CHECK(r.steps_done == 3);
    CHECK(r.checks == 2);  // the check after step 2 passed; the one after step 4 threw
    CHECK(contains(r.error, "silent data corruption: after step 4"));
    CHECK(contains(r.error, "model.layers."));  // the middle element of tiny's buffer is in a layer
    if (K >= 3) {
        CHECK(contains(r.error, strfmt("dp rank(s) %d of", flip_rank)));
        CHECK(contains(r.error, strfmt("from the other %d replicas'", K - 1)));
    } else {
        CHECK(contains(r.error, "cannot say which is wrong"));
    }
}

}  // namespace

TEST_SUITE("ch02 np1") {
TEST_CASE("SDC check: the checksum sees every bit, and --sdc-flip-bit is parsed or refused by name") {
    Tensor a = Tensor::from_host(std::vector<float>{1.0f, -2.5f, 3.25f, 0.0f}, {4}, Device::cpu);
    const uint64_t h = bit_checksum(a);
    CHECK(bit_checksum(a.clone(Device::cpu, Tag::workspace)) == h);
    for (int i = 0; i < 4; i++)
        for (int bit : {0, 16, 31}) {
            std::vector<float> v = a.to_host();
            uint32_t u;
            std::memcpy(&u, &v[i], 4);
            u ^= 1u << bit;
            std::memcpy(&v[i], &u, 4);
            CHECK(bit_checksum(Tensor::from_host(v, {4}, Device::cpu)) != h);  // -0.0 vs 0.0 too
        }
    // the same values in another order hash differently (it is not a sum)
    CHECK(bit_checksum(Tensor::from_host(std::vector<float>{-2.5f, 1.0f, 3.25f, 0.0f}, {4}, Device::cpu)) != h);
    SdcOptions o;
    parse_sdc_flip("1:3", o);
    CHECK((o.flip_rank == 1 && o.flip_step == 3));
    for (const char* bad : {"1", "1:0", "-1:3", "a:b", "1:3x"})
        CHECK(contains(error_of([&] { parse_sdc_flip(bad, o); }), "must be RANK:STEP"));
}
}

TEST_SUITE("ch02 np2") {
TEST_CASE("SDC check: two replicas that train normally agree at every check") { replicas_that_train_normally_agree(); }
TEST_CASE("SDC check: two replicas that disagree are reported, and the check says it cannot tell which") {
    a_flipped_bit_is_caught_and_the_rank_named(0);
}
}

TEST_SUITE("ch02 np3") {
TEST_CASE("SDC check: three replicas that train normally agree at every check") { replicas_that_train_normally_agree(); }
TEST_CASE("SDC check: a bit flipped on one replica is caught at the next check and the rank named") {
    // playbook: 003.7.6 — the flipped replica is caught at the next check and named
    a_flipped_bit_is_caught_and_the_rank_named(1);
}
}

TEST_SUITE("ch02 np4") {
TEST_CASE("SDC check: a bit flipped on one of four replicas is caught at the next check and the rank named") {
    a_flipped_bit_is_caught_and_the_rank_named(3);
}
}
