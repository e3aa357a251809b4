// test_checkpoint.cpp — checkpoints on one rank: the CRC, a save/resume that continues bit-exactly (f32, and
// bf16 weights with an fp32 master: 12 and 14 bytes a parameter), the
// async writer's bytes equal the sync ones, --keep after a resume from an earlier step, a step saved again,
// and every error the loader must name (missing, truncated, corrupted shard, another model, another data
// stream, a full disk that leaves the previous checkpoint intact, a save that never finished).
// The multi-rank layouts and resharding: tests/02_data_parallel/checkpoint_test.sh and the chapters above.
//   make test CH=00      build/bin/tests_00 -tc='*checkpoint*'
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../../common/checkpoint_async.hpp"
#include "../../common/checkpoint_load.hpp"
#include "../../common/checkpoint_save.hpp"
#include "../../common/data.hpp"
#include "../../common/training_step.hpp"
#include "../testing.hpp"

using namespace penta;
namespace fs = std::filesystem;

namespace {

// tiny's shape over the byte vocabulary the addition task needs
LlamaConfig tiny256() {
    LlamaConfig c = preset("tiny");
    c.vocab = 256;
    return c;
}

struct Run {
    std::unique_ptr<Model> model;
    std::unique_ptr<AdamW> optim;
};

// precision: "fp32" or "bf16" (bf16 weights, fp32 master and GEMMs)
Run make_run(const LlamaConfig& c, const std::string& precision = "fp32") {
    ModelOptions o;
    if (precision == "bf16") o.precision = Precision::bf16_params();
    Run r;
    r.model = std::make_unique<Model>(c, Device::cpu, 7, o);
    r.optim = make_adamw(*r.model, AdamWConfig{2e-3f, 0.9f, 0.95f, 1e-8f, 0.1f});
    return r;
}

BatchPlan plan() {
    BatchPlan p;
    p.seq = 16, p.micro_batch = 4, p.grad_accum = 2, p.global_batch = 8;
    return p;
}

CheckpointContext context(const Run& r, const LRSchedule& lr) {
    CheckpointContext c;
    c.model = r.model->config();
    c.precision = r.model->precision();
    c.global_batch = 8, c.seq = 16, c.seed = 7, c.data = "addition";
    c.lr = lr;
    c.adamw = r.optim->cfg;
    return c;
}

struct Trace {
    std::vector<double> loss, norm, scale;
};

// steps [first, last) of the 10-step schedule; saves after every `save_at` steps into dir (0: never), keeping
// `keep` checkpoints
Trace train(Run& r, const Dataset& data, int64_t first, int64_t last, const std::string& dir, int64_t save_at,
            bool async = false, int64_t keep = 0) {
    const LRSchedule lr{2e-3f, 1e-3f, 2, 10};
    Trace t;
    Checkpointer ck(CheckpointOptions{dir, save_at, 24, keep, async}, *r.model, *r.optim, context(r, lr),
                    GridCoords{}, nullptr, CheckpointExtras{});
    Trainer trainer{*r.model, *r.optim};
    for (int64_t s = first; s < last; s++) {
        StepResult res = training_step(trainer, data, s, plan(), lr.at(s + 1), 1.0f);
        t.loss.push_back(res.loss);
        t.norm.push_back(res.grad_norm);
        t.scale.push_back(res.loss_scale);
        if (!dir.empty() && save_at > 0 && (s + 1) % save_at == 0) ck.after_step(s + 1, 0.01, false);
    }
    ck.finish();
    return t;
}

std::string scratch(const char* name) {
    const fs::path p = fs::temp_directory_path() / strfmt("penta_ckpt_%d_%s", (int)getpid(), name);
    fs::remove_all(p);
    fs::create_directories(p);
    return p.string();
}

std::string load_error(const std::string& dir, const LlamaConfig& c) {
    Run r = make_run(c);
    try {
        load_checkpoint(dir, *r.model, *r.optim, context(r, LRSchedule{2e-3f, 1e-3f, 2, 10}));
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

void flip_byte(const std::string& path, size_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg((std::streamoff)at);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp((std::streamoff)at);
    f.write(&c, 1);
}

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("checkpoint: CRC-32 is zlib's (the check value of \"123456789\" is CBF43926), in parts as in one go") {
    const std::string s = "123456789";
    CHECK(crc32_update(0, s.data(), s.size()) == 0xCBF43926u);
    CHECK(crc32_update(crc32_update(0, s.data(), 4), s.data() + 4, 5) == 0xCBF43926u);
    CHECK(crc32_update(0, "", 0) == 0u);
}

TEST_CASE("checkpoint: save at step 5, resume, steps 6-10 equal the uninterrupted run bitwise (f32, and bf16 "
          "with a master)") {
    for (const std::string precision : {"fp32", "bf16"}) {
        CAPTURE(precision);
        const bool low = precision != "fp32";
        const LlamaConfig c = tiny256();
        auto data = make_dataset("addition", 7, (int32_t)c.vocab);
        const std::string dir = scratch(("bitexact_" + precision).c_str());
        Run a = make_run(c, precision);
        const Trace full = train(a, *data, 0, 10, dir, 5, false);
        REQUIRE(fs::exists(fs::path(dir) / "step_000005" / "metadata.json"));
        Run b = make_run(c, precision);
        CHECK(load_checkpoint((fs::path(dir) / "step_000005").string(), *b.model, *b.optim,
                              context(b, LRSchedule{2e-3f, 1e-3f, 2, 10})) == 5);
        CHECK(b.optim->step_count == 5);
        const Trace resumed = train(b, *data, 5, 10, "", 0, false);
        for (int i = 0; i < 5; i++) {
            CAPTURE(i + 6);
            CHECK(resumed.loss[i] == full.loss[i + 5]);  // bitwise: == on doubles
            CHECK(resumed.norm[i] == full.norm[i + 5]);
            CHECK(resumed.scale[i] == full.scale[i + 5]);
        }
        // the state after step 10 too
        const std::vector<float> wa = a.model->params().to_host(), wb = b.model->params().to_host();
        CHECK(wa == wb);
        CHECK(a.optim->m.to_host() == b.optim->m.to_host());
        // seed 003's sizes: 12 bytes a parameter (f32 weights + m + v), 14 with bf16 weights and an fp32 master
        CheckpointReader ck((fs::path(dir) / "step_000005").string());
        const double per_param = ck.metadata()["bytes_per_param"].get<double>();
        CHECK(per_param == doctest::Approx(low ? 14.0 : 12.0).epsilon(1e-12));
        CHECK(ck.metadata()["shards"][0]["pieces"][0]["dtype"] == (low ? "bf16" : "f32"));
        CHECK(ck.metadata()["data"]["samples_seen"].get<int64_t>() == 40);
        std::ifstream latest((fs::path(dir) / "latest").string());
        std::string name;
        std::getline(latest, name);
        CHECK(name == "step_000010");
        CHECK(resolve_resume_dir(dir, "") == (fs::path(dir) / "step_000010").string());
        fs::remove_all(dir);
    }
}

TEST_CASE("checkpoint: the async writer writes the same bytes as the synchronous save; --keep drops the oldest") {
    const LlamaConfig c = tiny256();
    auto data = make_dataset("addition", 7, (int32_t)c.vocab);
    const std::string sync_dir = scratch("sync"), async_dir = scratch("async");
    Run a = make_run(c), b = make_run(c);
    const Trace ta = train(a, *data, 0, 4, sync_dir, 2);
    const Trace tb = train(b, *data, 0, 4, async_dir, 2, true);
    CHECK(ta.loss == tb.loss);
    for (const char* step : {"step_000002", "step_000004"}) {
        CAPTURE(step);
        std::ifstream x((fs::path(sync_dir) / step / rank_file_name(0)).string(), std::ios::binary);
        std::ifstream y((fs::path(async_dir) / step / rank_file_name(0)).string(), std::ios::binary);
        const std::string bx((std::istreambuf_iterator<char>(x)), {}), by((std::istreambuf_iterator<char>(y)), {});
        CHECK(!bx.empty());
        CHECK(bx == by);
    }
    // keep 1: only the newest survives a save
    Checkpointer keep1(CheckpointOptions{sync_dir, 1, 24, 1, false}, *a.model, *a.optim,
                       context(a, LRSchedule{2e-3f, 1e-3f, 2, 10}), GridCoords{}, nullptr);
    keep1.after_step(6, 0.01, false);
    CHECK(!fs::exists(fs::path(sync_dir) / "step_000002"));
    CHECK(!fs::exists(fs::path(sync_dir) / "step_000004"));
    CHECK(fs::exists(fs::path(sync_dir) / "step_000006"));
    fs::remove_all(sync_dir);
    fs::remove_all(async_dir);
}

TEST_CASE("checkpoint: a bf16 checkpoint resumed in fp32 takes the fp32 master, not its rounded copy") {
    const LlamaConfig c = tiny256();
    auto data = make_dataset("addition", 7, (int32_t)c.vocab);
    const std::string dir = scratch("precision_change");
    Run a = make_run(c, "bf16");
    train(a, *data, 0, 2, dir, 2);
    Run f = make_run(c);
    load_checkpoint((fs::path(dir) / "step_000002").string(), *f.model, *f.optim,
                    context(f, LRSchedule{2e-3f, 1e-3f, 2, 10}));
    CHECK(f.model->params().to_host() == a.optim->master.to_host());
    CHECK(f.model->params().to_host() != a.model->params().to_host());  // the bf16 weights differ from the master
    fs::remove_all(dir);
}

std::string latest_of(const std::string& dir) {
    std::ifstream in((fs::path(dir) / "latest").string());
    std::string name;
    std::getline(in, name);
    return name;
}

TEST_CASE("checkpoint: --keep after a resume from an earlier step keeps the step `latest` names; a step saved again "
          "replaces the old one through an aside copy") {
    const LlamaConfig c = tiny256();
    auto data = make_dataset("addition", 7, (int32_t)c.vocab);
    const std::string dir = scratch("keep_resumed");
    Run a = make_run(c);
    train(a, *data, 0, 6, dir, 3);  // steps 3 and 6
    // resumed from step 3, saving every 5 steps and keeping 1: step 5 is committed, and it must survive its prune
    Run b = make_run(c);
    load_checkpoint((fs::path(dir) / "step_000003").string(), *b.model, *b.optim,
                    context(b, LRSchedule{2e-3f, 1e-3f, 2, 10}));
    train(b, *data, 3, 5, dir, 5, false, 1);
    CHECK(latest_of(dir) == "step_000005");
    CHECK(fs::exists(fs::path(dir) / "step_000005" / "metadata.json"));
    CHECK(!fs::exists(fs::path(dir) / "step_000006"));  // the abandoned future
    CHECK(!fs::exists(fs::path(dir) / "step_000003"));  // beyond --keep 1
    CHECK(load_error((fs::path(dir) / latest_of(dir)).string(), c) == "");
    // keep 2 counts back from the committed step: after step 10, steps 5 and 10 stay
    train(b, *data, 5, 10, dir, 5, false, 2);
    CHECK(fs::exists(fs::path(dir) / "step_000005"));
    CHECK(fs::exists(fs::path(dir) / "step_000010"));

    // step 10 saved again (a run resumed from it, say): replaced, the aside copy removed after `latest` is written
    {  // a file only the old step_000010 holds: gone once the step is written anew
        std::ofstream marker((fs::path(dir) / "step_000010" / "old.marker").string());
        marker << "the step as first saved";
    }
    Checkpointer again(CheckpointOptions{dir, 10, 24, 0, false}, *b.model, *b.optim,
                       context(b, LRSchedule{2e-3f, 1e-3f, 2, 10}), GridCoords{}, nullptr);
    again.after_step(10, 0.01, false);
    CHECK(fs::exists(fs::path(dir) / "step_000010" / "metadata.json"));
    CHECK(!fs::exists(fs::path(dir) / "step_000010" / "old.marker"));  // a new folder, not the old one kept
    CHECK(!fs::exists(fs::path(dir) / "step_000010.old"));
    // a crash between the two renames of that re-save: the old copy aside, the new one not renamed in yet;
    // `latest` still names step_000010, and --resume finds the aside copy
    fs::rename(fs::path(dir) / "step_000010", fs::path(dir) / "step_000010.old");
    CHECK(resolve_resume_dir(dir, "") == (fs::path(dir) / "step_000010.old").string());
    CHECK(load_error(resolve_resume_dir(dir, ""), c) == "");
    fs::remove_all(dir);
}

TEST_CASE("checkpoint: a missing, truncated or corrupted shard, another model or data stream are errors naming the file") {
    const LlamaConfig c = tiny256();
    auto data = make_dataset("addition", 7, (int32_t)c.vocab);
    const std::string dir = scratch("errors");
    Run a = make_run(c);
    train(a, *data, 0, 2, dir, 2);
    const std::string step = (fs::path(dir) / "step_000002").string(), shard = (fs::path(step) / rank_file_name(0)).string();
    CHECK(load_error(step, c) == "");  // intact: loads

    std::string e = load_error(step, preset("small"));
    CHECK(e.find("another model") != std::string::npos);
    CAPTURE(e);
    CHECK(e.find("hidden is 32 in the checkpoint (tiny)") != std::string::npos);
    {
        Run r = make_run(c);
        CheckpointContext ctx = context(r, LRSchedule{2e-3f, 1e-3f, 2, 10});
        ctx.global_batch = 16;
        CheckpointReader ck(step);
        std::string what;
        try {
            ck.check_compatible(ctx);
        } catch (const Error& x) {
            what = x.what();
        }
        CHECK(what.find("global_batch 8") != std::string::npos);
    }

    const std::string backup = shard + ".orig";
    fs::copy_file(shard, backup);
    flip_byte(shard, 1000);  // one bit of one value
    e = load_error(step, c);
    CHECK(e.find("corrupted") != std::string::npos);
    CHECK(e.find(rank_file_name(0)) != std::string::npos);
    CHECK(e.find("CRC-32") != std::string::npos);

    fs::copy_file(backup, shard, fs::copy_options::overwrite_existing);
    fs::resize_file(shard, fs::file_size(shard) - 7);
    e = load_error(step, c);
    CHECK(e.find("truncated") != std::string::npos);
    CHECK(e.find(rank_file_name(0)) != std::string::npos);

    fs::remove(shard);
    e = load_error(step, c);
    CHECK(e.find("missing") != std::string::npos);
    CHECK(e.find(rank_file_name(0)) != std::string::npos);

    fs::remove(fs::path(step) / "metadata.json");
    e = load_error(step, c);
    CHECK(e.find("metadata.json is missing") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("checkpoint: a full disk fails the save cleanly; `latest` and the previous checkpoint stay intact") {
    const LlamaConfig c = tiny256();
    auto data = make_dataset("addition", 7, (int32_t)c.vocab);
    const std::string dir = scratch("full");
    Run a = make_run(c);
    train(a, *data, 0, 2, dir, 2);
    ::setenv("PENTA_CKPT_DISK_BYTES", "5000", 1);  // the next shard write runs out of space after 5000 bytes
    std::string e;
    try {
        Checkpointer ck(CheckpointOptions{dir, 1, 24, 0, false}, *a.model, *a.optim,
                        context(a, LRSchedule{2e-3f, 1e-3f, 2, 10}), GridCoords{}, nullptr);
        ck.after_step(3, 0.01, false);
    } catch (const Error& x) {
        e = x.what();
    }
    ::unsetenv("PENTA_CKPT_DISK_BYTES");
    CHECK(e.find("No space left on device") != std::string::npos);
    CHECK(e.find("rank_00000.bin") != std::string::npos);
    CHECK(e.find("latest") != std::string::npos);
    CHECK(!fs::exists(fs::path(dir) / "step_000003"));
    CHECK(!fs::exists(fs::path(dir) / "step_000003.tmp"));
    std::ifstream latest((fs::path(dir) / "latest").string());
    std::string name;
    std::getline(latest, name);
    CHECK(name == "step_000002");
    CHECK(load_error((fs::path(dir) / name).string(), c) == "");
    // a save that died before its rename: a .tmp folder, never named by latest nor accepted by --resume
    fs::create_directories(fs::path(dir) / "step_000004.tmp");
    CHECK(resolve_resume_dir(dir, "") == (fs::path(dir) / "step_000002").string());
    std::string r;
    try {
        resolve_resume_dir((fs::path(dir) / "step_000004").string(), "");
    } catch (const Error& x) {
        r = x.what();
    }
    CHECK(r.find("never finished") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("checkpoint: √(2δM) and --save-every's forms") {
    CHECK(optimal_checkpoint_interval(2.0, 3600.0) == doctest::Approx(120.0));  // √(2·2·3600)
    CHECK(parse_save_every("auto") == -1);
    CHECK(parse_save_every("25") == 25);
    std::string e;
    try {
        parse_save_every("5x");
    } catch (const Error& x) {
        e = x.what();
    }
    CHECK(e.find("--save-every 5x") != std::string::npos);
}

}  // TEST_SUITE
