// test_causality.cpp — the causal mask, end to end through the model: changing the token at position j
// leaves the logits of every earlier position BIT-identical, changes position j's, and changes position
// j+1's (so the later positions do read the past: a mask that hid every earlier key would pass the first
// check). On both attention kernels (naive, flash), on the CPU and, when there is one, the GPU.
//
// Why bitwise: every op before the head works on one token row at a time except attention, and a query
// row's attention reads only the keys the mask lets it see; a masked key's probability is exactly 0, and
// 0 * v is exactly 0. So nothing of a later token can reach an earlier row, not even in the last bit. A
// model that lets a query see the next token trains *better* (it reads the answer) and passes every
// training check; this test fails on it.
// Playbook: "First steps: training on one GPU" (the causal language model). Run: `make test CH=01`, or
//   build/bin/tests_01 -ts='ch01 np1' -tc='*causality*'
#include <cstring>

#include "../../common/model.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr int64_t kB = 2, kT = 72;  // 72 tokens: three of the flash kernel's 32-wide tiles, the last partial

void check_causal(Device device, AttentionKernel kernel) {
    LlamaConfig c = preset("tiny");
    c.max_seq = kT;
    ModelOptions o;
    o.attention = kernel;
    Model model(c, device, 3, o);
    // far from init (std 0.02 makes attention nearly uniform): matrices N(0, 0.3^2), norms 1 + N(0, 0.3^2)
    std::vector<float> p = model.params().to_host();
    for (const ParamTensor& t : model.tensors())
        for (int64_t i = 0; i < t.numel(); i++)
            p[t.offset + i] = (t.init_std == 0 ? 1.0f : 0.0f) + 0.3f * rng_normal(4, name_stream(t.name), (uint64_t)i);
    Tensor host = Tensor::from_host(p, {(int64_t)p.size()}, Device::cpu, Tag::workspace);
    copy(model.params(), host.clone(device, Tag::workspace));
    const std::vector<int32_t> tokens = random_tokens({kB * kT}, (int32_t)c.vocab, 8).to_host_i32();
    auto logits_of = [&](const std::vector<int32_t>& tok) {
        return model.forward_logits(Tensor::from_host_i32(tok, {kB * kT}, device), kB, kT).to_host();  // (B T, V)
    };
    const std::vector<float> base = logits_of(tokens);
    const int64_t V = c.vocab;
    auto row = [&](const std::vector<float>& l, int64_t b, int64_t t) { return l.data() + (b * kT + t) * V; };
    for (int64_t j : {int64_t(0), int64_t(1), int64_t(30), int64_t(31), int64_t(32), int64_t(33), int64_t(63),
                      int64_t(64), kT - 2}) {
        CAPTURE(j);
        std::vector<int32_t> changed = tokens;
        for (int64_t b = 0; b < kB; b++) changed[b * kT + j] = (tokens[b * kT + j] + 1) % (int32_t)V;
        const std::vector<float> l = logits_of(changed);
        for (int64_t b = 0; b < kB; b++) {
            CAPTURE(b);
            int64_t first_changed = -1;
            for (int64_t t = 0; t < j && first_changed < 0; t++)
                if (std::memcmp(row(l, b, t), row(base, b, t), V * sizeof(float)) != 0) first_changed = t;
            CHECK_MESSAGE(first_changed < 0, "changing token " << j << " changed the logits of the earlier position "
                                                               << first_changed << ": a query sees a later key");
            CHECK_MESSAGE(std::memcmp(row(l, b, j), row(base, b, j), V * sizeof(float)) != 0,
                          "changing token " << j << " left its own position's logits unchanged");
            CHECK_MESSAGE(std::memcmp(row(l, b, j + 1), row(base, b, j + 1), V * sizeof(float)) != 0,
                          "changing token " << j << " left position " << j + 1 << " unchanged: it does not attend to "
                                                                                 "earlier keys");
        }
    }
}

}  // namespace

TEST_SUITE("ch01 np1") {
    TEST_CASE("causality: changing token j leaves every earlier position's logits bit-identical (naive and flash)") {
        for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash}) {
            CAPTURE((k == AttentionKernel::naive ? "naive" : "flash"));
            check_causal(Device::cpu, k);
        }
    }

    TEST_CASE("[gpu] causality on the GPU: changing token j leaves every earlier position's logits bit-identical") {
        SKIP_WITHOUT_GPU();
        for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash}) {
            CAPTURE((k == AttentionKernel::naive ? "naive" : "flash"));
            check_causal(Device::cuda, k);
        }
    }
}
