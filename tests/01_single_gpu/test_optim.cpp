// test_optim.cpp — AdamW over ranges (no decay for norm weights), global grad-norm clipping, the same
// update on a ZeRO-style shard, the warmup + cosine LR schedule, and the step log / metrics helpers.
// Run: build/bin/tests_01 -ts='ch01 np1' -tc='*AdamW*,*clip*,*LR*,*StepLog*,*FLOP*'
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../common/comm.hpp"
#include "../../common/metrics.hpp"
#include "../../common/optim.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::check_close;
using penta::testing::random_tensor;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

// PyTorch's AdamW for one element, in double: the reference the ranges are checked against
struct ScalarAdamW {
    double p, m = 0, v = 0;
    void step(double g, double lr, double wd, int t, const AdamWConfig& c) {
        p *= 1 - lr * wd;
        m = c.beta1 * m + (1 - c.beta1) * g;
        v = c.beta2 * v + (1 - c.beta2) * g * g;
        double mhat = m / (1 - std::pow(c.beta1, t)), vhat = v / (1 - std::pow(c.beta2, t));
        p -= lr * mhat / (std::sqrt(vhat) + c.eps);
    }
};

std::vector<float> scaled(std::vector<float> x, float s) {
    for (auto& e : x) e *= s;
    return x;
}

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("AdamW ranges: decay only where asked, untouched outside every range") {
    const int64_t n = 12;
    Tensor p = random_tensor({n}, 1, 1.0f, Device::cpu, Tag::params);
    Tensor g = random_tensor({n}, 2, 1.0f, Device::cpu, Tag::grads);
    AdamWConfig cfg;
    cfg.weight_decay = 0.5f;  // large, so a wrongly decayed element is far off
    // [0,6) decays, element 6 belongs to no range, [7,12) is a norm weight
    AdamW opt(p, g, {{0, 6, true}, {7, 5, false}}, cfg);
    std::vector<float> p0 = p.to_host(), gh = g.to_host();
    std::vector<ScalarAdamW> ref;
    for (float x : p0) ref.push_back(ScalarAdamW{x});
    const float lrs[3] = {1e-2f, 5e-3f, 2e-2f};
    for (int s = 0; s < 3; s++) {
        opt.step(lrs[s], 0.0f);
        for (int64_t i = 0; i < n; i++)
            if (i != 6) ref[i].step(gh[i], lrs[s], i < 6 ? cfg.weight_decay : 0.0, s + 1, cfg);
    }
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; i++) want[i] = (float)ref[i].p;
    want[6] = p0[6];
    check_close(p.to_host(), want, 1e-5, 1e-6, "AdamW params vs scalar reference");
    CHECK(opt.step_count == 3);
    CHECK(mem_stats(Device::cpu).current[(int)Tag::optim] >= 2 * n * 4);
    // overlapping or out-of-bounds ranges are rejected
    CHECK_THROWS_AS(AdamW(p, g, {{0, 6, true}, {5, 2, false}}, cfg), Error);
    CHECK_THROWS_AS(AdamW(p, g, {{10, 3, true}}, cfg), Error);
}

TEST_CASE("clipping: a grad of norm 10 with max_norm 1 updates like the grad times 0.1") {
    const int64_t n = 16;
    std::vector<float> gv = random_tensor({n}, 3).to_host();
    double norm = 0;
    for (float x : gv) norm += (double)x * x;
    gv = scaled(gv, (float)(10.0 / std::sqrt(norm)));  // norm 10
    std::vector<float> pv = random_tensor({n}, 4).to_host();

    Tensor p1 = Tensor::from_host(pv, {n}, Device::cpu), g1 = Tensor::from_host(gv, {n}, Device::cpu);
    Tensor p2 = Tensor::from_host(pv, {n}, Device::cpu);
    Tensor g2 = Tensor::from_host(scaled(gv, (float)(0.1 * (1.0 - 1e-7))), {n}, Device::cpu);  // 1/(10+1e-6)
    AdamW clipped(p1, g1, {}, AdamWConfig{}), reference(p2, g2, {}, AdamWConfig{});
    CHECK(clipped.step(1e-2f, 1.0f) == doctest::Approx(10.0).epsilon(1e-6));  // the norm before clipping
    reference.step(1e-2f, 0.0f);
    // Adam's update barely depends on the grad's scale, so compare the moments too
    check_close(clipped.m.to_host(), reference.m.to_host(), 1e-5, 0, "m");
    check_close(clipped.v.to_host(), reference.v.to_host(), 1e-5, 0, "v");
    check_close(p1.to_host(), p2.to_host(), 1e-6, 1e-7, "params");
    CHECK(clip_scale(0.5, 1.0f) == 1.0f);
    CHECK(clip_scale(10.0, 0.0f) == 1.0f);
}

TEST_CASE("AdamW on shards with the global norm of their partial sums equals AdamW on the full buffer") {
    const int64_t n = 20, cut = 8;
    std::vector<ParamRange> full_ranges = {{0, 6, true}, {6, 3, false}, {9, 11, true}};
    std::vector<float> pv = random_tensor({n}, 5).to_host(), gv = random_tensor({n}, 6, 3.0f).to_host();
    Tensor pf = Tensor::from_host(pv, {n}, Device::cpu), gf = Tensor::from_host(gv, {n}, Device::cpu);
    AdamW full(pf, gf, full_ranges, AdamWConfig{});
    double norm_full = full.step(1e-2f, 1.0f);

    Tensor ps = Tensor::from_host(pv, {n}, Device::cpu), gs = Tensor::from_host(gv, {n}, Device::cpu);
    auto r0 = ranges_in_shard(full_ranges, 0, cut), r1 = ranges_in_shard(full_ranges, cut, n - cut);
    REQUIRE(r1.size() == 2);
    CHECK(r1[0].offset == 0);
    CHECK(r1[0].count == 1);
    CHECK(!r1[0].decay);
    AdamW s0(ps.flat(0, cut), gs.flat(0, cut), r0, AdamWConfig{});
    AdamW s1(ps.flat(cut, n - cut), gs.flat(cut, n - cut), r1, AdamWConfig{});
    // what one all-reduce of the two "ranks'" partial sums of squares gives both of them
    const double norm = std::sqrt(s0.local_sum_squares() + s1.local_sum_squares());
    CHECK(norm == doctest::Approx(norm_full));
    s0.update(1e-2f, clip_scale(norm, 1.0f));
    s1.update(1e-2f, clip_scale(norm, 1.0f));
    check_close(ps.to_host(), pf.to_host(), 1e-6, 1e-7, "sharded vs full params");
}

TEST_CASE("AdamW: ranges this rank does not count stay out of the norm; the norm takes one reduction over its group") {
    const int64_t n = 10;
    Tensor p = random_tensor({n}, 1), g = random_tensor({n}, 2);
    // elements [4, 10) belong to a tensor another rank counts (a replicated norm weight on tp rank 1)
    AdamW opt(p, g, {{0, 4, true, true}, {4, 6, false, false}}, AdamWConfig{}, false, nullptr);
    CHECK(opt.local_sum_squares() == doctest::Approx(sum_squares(g.flat(0, 4))));
    auto self = make_self_comm("world");
    AdamW counted(p, g, {}, AdamWConfig{}, false, self.get());
    for (int s = 0; s < 3; s++) counted.step(1e-3f, 1.0f);
    CHECK(counted.norm_reductions == 3);
    CHECK(self->counters().scalar_reductions == 3);
    CHECK(self->counters().total_calls() == 0);  // nothing else: no tensor collective for the norm
}

TEST_CASE("AdamW with fp32 master weights: bf16 weights are the rounding of an fp32 copy that takes every step") {
    const int64_t n = 64;
    std::vector<float> pv = random_tensor({n}, 7).to_host(), gv = random_tensor({n}, 8).to_host();
    Tensor ref_p = Tensor::from_host(pv, {n}, Device::cpu), g = Tensor::from_host(gv, {n}, Device::cpu);
    Tensor bf = Tensor::from_host(pv, {n}, Device::cpu, Tag::params, DType::bf16);
    // the master starts from the bf16 weights (exact in f32), so the reference does too
    Tensor ref_start = Tensor::empty({n}, DType::f32, Device::cpu, Tag::workspace);
    convert(ref_start, bf);
    copy(ref_p, ref_start);
    AdamW ref(ref_p, g, {}, AdamWConfig{});
    AdamW mixed(bf, g, {}, AdamWConfig{}, true);
    CHECK(mixed.master.defined());
    CHECK(mixed.master.tag() == Tag::master);
    CHECK(mem_stats(Device::cpu).current[(int)Tag::master] >= n * 4);
    for (int s = 0; s < 5; s++) {
        ref.step(1e-2f, 1.0f);
        mixed.step(1e-2f, 1.0f);
    }
    // the master took exactly the f32 steps; the weights are its bf16 rounding
    // playbook: 000.12.7 003.6.1 — the master takes exactly the f32 steps; the bf16 weights are its rounding
    check_close(mixed.master.to_host(), ref_p.to_host(), 0, 0, "fp32 master vs plain f32 AdamW");
    std::vector<float> rounded = Tensor::from_host(ref_p.to_host(), {n}, Device::cpu, Tag::workspace, DType::bf16).to_host();
    check_close(bf.to_host(), rounded, 0, 0, "bf16 weights == bf16(master)");
    CHECK(contains(error_of([&] { AdamW no_master(bf, g, {}, AdamWConfig{}); }), "fp32 master"));
}

TEST_CASE("LR schedule: linear warmup from 0, cosine to min_lr") {
    LRSchedule s{1e-3f, 1e-4f, 10, 110};
    CHECK(s.at(0) == 0.0f);
    CHECK(s.at(5) == doctest::Approx(5e-4));
    CHECK(s.at(10) == doctest::Approx(1e-3));
    CHECK(s.at(60) == doctest::Approx(5.5e-4));  // halfway through the cosine: the mean of max and min
    CHECK(s.at(110) == doctest::Approx(1e-4));
    CHECK(s.at(500) == doctest::Approx(1e-4));
    CHECK(s.at(30) > s.at(31));
    LRSchedule no_warmup{1e-3f, 0.0f, 0, 100};
    CHECK(no_warmup.at(0) == doctest::Approx(1e-3));
    CHECK_THROWS_AS(LRSchedule({1e-3f, 0.0f, 100, 100}).at(1), Error);
}

TEST_CASE("AdamW: the first non-finite gradient, named by its range, also in a shard") {
    const int64_t n = 12;
    std::vector<float> gv(n, 1.0f);
    gv[9] = INFINITY;
    gv[10] = NAN;
    Tensor p = random_tensor({n}, 1), g = Tensor::from_host(gv, {n}, Device::cpu);
    std::vector<ParamRange> full = {{0, 4, true, true, "a"}, {4, 8, true, true, "b"}};
    AdamW opt(p, g, full, AdamWConfig{});
    AdamW::NonFinite bad = opt.first_non_finite_grad();
    CHECK(bad.found);
    CHECK(bad.name == "b");
    CHECK(bad.element == 5);  // element 9 of the buffer is element 5 of b
    CHECK(std::isinf(bad.value));
    // a shard [6, 12) of the buffer: b's elements 2..7, named as elements of b
    std::vector<ParamRange> shard = ranges_in_shard(full, 6, 6);
    REQUIRE(shard.size() == 1);
    CHECK(shard[0].name == "b");
    CHECK(shard[0].name_offset == 2);
    AdamW part(p.flat(6, 6), g.flat(6, 6), shard, AdamWConfig{});
    CHECK(part.first_non_finite_grad().element == 5);
    gv[9] = gv[10] = 0.5f;
    AdamW fine(p, Tensor::from_host(gv, {n}, Device::cpu), full, AdamWConfig{});
    CHECK(!fine.first_non_finite_grad().found);
}

// The values the train loop uses (it asks for steps 1 ... total), pinned: with warmup W step k <= W gets
// max·k/W and the cosine starts at the peak on step W (chapter 01's trajectory depends on these exact
// values); without warmup step 1 is the peak (it used to be a step past it, so max_lr was never used).
TEST_CASE("LR schedule: the values of steps 1 ... total with warmup 0 and warmup > 0") {
    const float mx = 2e-3f, mn = 1e-3f;
    auto cosine = [&](double progress) { return (float)(mn + 0.5 * (mx - mn) * (1.0 + std::cos(M_PI * progress))); };
    LRSchedule w0{mx, mn, 0, 5};
    const float want0[5] = {mx, cosine(0.25), cosine(0.5), cosine(0.75), mn};
    for (int k = 1; k <= 5; k++) CHECK(w0.at(k) == want0[k - 1]);
    CHECK(w0.at(1) == mx);  // the peak, exactly
    LRSchedule w4{mx, mn, 4, 10};
    const float want4[10] = {mx * 1 / 4, mx * 2 / 4, mx * 3 / 4, cosine(0), cosine(1.0 / 6), cosine(2.0 / 6),
                             cosine(3.0 / 6), cosine(4.0 / 6), cosine(5.0 / 6), mn};
    for (int k = 1; k <= 10; k++) CHECK(w4.at(k) == want4[k - 1]);
    CHECK(w4.at(4) == mx);  // the peak when warmup ends
    CHECK(w4.at(11) == mn);
    // one step without warmup: at the peak; the train loop's clamp (warmup <= steps - 1) keeps total > warmup
    CHECK(LRSchedule({mx, mn, 0, 1}).at(1) == mx);
}

TEST_CASE("model FLOPs per token, GPU peak table, units") {
    // 6N + 12 L h T: N = 1e6, L = 4, h = 256, T = 128
    // playbook: 000.02.14 000.B.4 — MFU's numerator 6N + 12LhT a token
    CHECK(model_flops_per_token(1000000, 4, 256, 128) == doctest::Approx(6e6 + 12.0 * 4 * 256 * 128));
    CHECK(gpu_peak_flops("NVIDIA H100 80GB HBM3", DType::bf16) == 989e12);
    CHECK(gpu_peak_flops("NVIDIA H200", DType::bf16) == 989e12);
    CHECK(gpu_peak_flops("NVIDIA H100 PCIe", DType::bf16) == 756e12);
    CHECK(gpu_peak_flops("NVIDIA A100-SXM4-80GB", DType::f32) == 19.5e12);
    CHECK(gpu_peak_flops("NVIDIA A100-SXM4-80GB", DType::f32, true) == 156e12);
    CHECK(gpu_peak_flops("NVIDIA L40S", DType::bf16) == 362e12);
    CHECK(gpu_peak_flops("Some Future GPU", DType::bf16) == 0);
    CHECK(human_bytes(512) == "512B");
    CHECK(human_bytes(16 * 1024 * 1024) == "16.0MiB");
    CHECK(human_count(12345) == "12.3k");
    CHECK(cpu_sgemm_peak_flops() > 0);
    CHECK(cpu_sgemm_peak_flops() == cpu_sgemm_peak_flops());  // measured once, then cached
}

TEST_CASE("StepLog: the printed line and a JSONL line that parses back") {
    char tmpl[] = "/tmp/penta_log_XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    close(fd);
    Tensor w = Tensor::zeros({1024}, DType::f32, Device::cpu, Tag::params);  // something to report
    StepLogConfig cfg;
    cfg.flops_per_token = 1e6;
    cfg.peak_flops = 1e12;
    cfg.num_devices = 2;
    cfg.jsonl_path = tmpl;
    cfg.print = false;
    StepRecord r;
    r.step = 10;
    r.total_steps = 200;
    r.loss = 1.2345;
    r.lr = 3e-4f;
    r.grad_norm = 0.812;
    r.tokens = 4000;
    r.seconds = 0.5;  // 8000 tok/s, 8e9 FLOP/s over 2 devices = 4e9 per device, MFU 0.4%
    r.task_accuracy = 0.875;
    r.extra = {{"bubble", 0.25}};
    {
        StepLog log(cfg);
        std::string line = log.line(r);
        CHECK(line.rfind("step  10/200 | loss 1.2345 | lr 3.00e-04 | grad norm 0.812", 0) == 0);
        CHECK(line.find("8.0k tok/s") != std::string::npos);
        CHECK(line.find("4.0 GFLOP/s/dev") != std::string::npos);
        CHECK(line.find("MFU 0.4%") != std::string::npos);
        CHECK(line.find("acc 87.5%") != std::string::npos);
        CHECK(line.find("mem params ") != std::string::npos);
        log.log(r);
        r.step = 11;
        log.log(r);
    }
    std::ifstream in(tmpl);
    std::string l1, l2, l3;
    REQUIRE(std::getline(in, l1));
    REQUIRE(std::getline(in, l2));
    CHECK(!std::getline(in, l3));
    std::remove(tmpl);
    auto j = nlohmann::json::parse(l1);
    CHECK(j["step"] == 10);
    CHECK(j["total_steps"] == 200);
    CHECK(j["loss"].get<double>() == doctest::Approx(1.2345));
    CHECK(j["lr"].get<double>() == doctest::Approx(3e-4));
    CHECK(j["grad_norm"].get<double>() == doctest::Approx(0.812));
    CHECK(j["tokens_per_s"].get<double>() == doctest::Approx(8000));
    CHECK(j["tflops_per_device"].get<double>() == doctest::Approx(4e-3));
    CHECK(j["mfu"].get<double>() == doctest::Approx(4e-3));
    CHECK(j["task_accuracy"].get<double>() == doctest::Approx(0.875));
    CHECK(j["bubble"].get<double>() == doctest::Approx(0.25));
    CHECK(j["mem"]["params"]["current"].get<int64_t>() >= 4096);
    CHECK(j["mem"].contains("activations"));
    CHECK(nlohmann::json::parse(l2)["step"] == 11);
    CHECK(memory_table(Device::cpu).find("params") != std::string::npos);
}

}  // TEST_SUITE
