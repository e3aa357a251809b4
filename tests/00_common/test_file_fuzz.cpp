// test_file_fuzz.cpp — the two binary formats pentatron reads from files others may have written, crafted and
// mutated: a checkpoint's metadata.json (with its pieces' offsets, sizes, counts, types) and a safetensors
// header. Every case must end in a penta::Error whose message names the file (and, for the crafted cases, the
// key and the rule), or load when the change is legal: never a signal, never a bare nlohmann exception, never
// an offset that wraps past a bounds check (issue 30: an offset of 2^64 - 8 used to segfault the loader).
//   1. a table of crafted cases, each with the text its message must hold;
//   2. seeded random mutations (a fixed count, the same every run): 1-3 structural edits of the JSON (a value
//      replaced by an edge value or perturbed, a key removed, an element duplicated) with the checksum
//      rewritten so the edit reaches the field checks, and byte edits of the raw text (metadata.json without
//      its checksum rewritten must be refused by the checksum; a safetensors file as a whole).
// The counts of cases and outcomes are printed. A crash would kill the test binary: `make test` fails.
//   build/bin/tests_00 -tc='*fuzz*'          (make test CH=00)
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>

#include "../../common/checkpoint_load.hpp"
#include "../../common/checkpoint_save.hpp"
#include "../../common/safetensors.hpp"
#include "../../common/training_step.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t k2_64_minus_8 = 18446744073709551608ull;

std::string scratch_dir(const char* name) {
    const fs::path p = fs::temp_directory_path() / strfmt("penta_fuzz_%d_%s", (int)getpid(), name);
    fs::remove_all(p);
    fs::create_directories(p);
    return p.string();
}

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// [[[ ... 0 ... ]]], `levels` deep: past json_strict's limit it must be refused, not dumped (the stack)
json nested(int levels) {
    std::string s(levels, '[');
    s += "0" + std::string(levels, ']');
    return json::parse(s);
}

// Structural and byte mutations, from one seeded generator.
class Mutator {
   public:
    explicit Mutator(uint64_t seed) : rng_(seed) {
        for (json v : {json(0), json(1), json(-1), json(-12), json(2), json(255), json(65536), json(INT32_MAX),
                       json(2147483648ll), json(UINT32_MAX), json(4294967296ll), json(INT64_MAX), json(INT64_MIN),
                       json(k2_64_minus_8), json(UINT64_MAX), json(1.5), json(-0.5), json(1e300), json(""), json("x"),
                       json("f32"), json("param"), json("../rank_00000.bin"), json("rank_00000.bin"), json(true),
                       json(false), json(nullptr), json::array(), json::object(), json::array({0}),
                       json::array({1, 1}), json::array({2147483648ll}), nested(3), nested(kJsonMaxDepth + 5)})
            edge_.push_back(v);
    }
    uint64_t below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

    // one edit of j: a node (not the root) replaced, perturbed, removed or duplicated
    void mutate(json& j) {
        std::vector<json::json_pointer> nodes;
        collect(j, json::json_pointer(), nodes);
        if (nodes.empty()) return;
        const json::json_pointer at = nodes[below(nodes.size())];
        json& v = j[at];
        json& parent = j[at.parent_pointer()];
        switch (below(5)) {
            case 0: v = edge_[below(edge_.size())]; break;
            case 1: v = perturb(v); break;
            case 2:  // removed
                if (parent.is_object()) parent.erase(at.back());
                else if (parent.is_array()) parent.erase(parent.begin() + (std::ptrdiff_t)std::stoull(at.back()));
                break;
            case 3:  // duplicated beside itself (an array), or copied over a sibling (an object)
                if (parent.is_array()) parent.push_back(json(v));
                else if (parent.is_object() && !parent.empty()) {
                    auto it = parent.begin();
                    std::advance(it, (std::ptrdiff_t)below(parent.size()));
                    *it = json(v);
                }
                break;
            default: v = edge_[below(edge_.size())].is_number() ? perturb(edge_[below(edge_.size())]) : json("?");
        }
    }

    // one byte edit: flipped, removed, inserted, or the text cut short
    std::string mutate_bytes(std::string s) {
        if (s.empty()) return std::string(1, (char)below(256));
        const size_t at = below(s.size());
        switch (below(4)) {
            case 0: s[at] = (char)(s[at] ^ (1 << below(8))); break;
            case 1: s.erase(at, 1); break;
            case 2: s.insert(at, 1, "{}[]\",:0-9e.\\"[below(13)]); break;
            default: s.resize(at);
        }
        return s;
    }

   private:
    void collect(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
        if (!at.empty()) out.push_back(at);
        if (j.is_object())
            for (auto it = j.begin(); it != j.end(); ++it) collect(*it, at / it.key(), out);
        else if (j.is_array())
            for (size_t i = 0; i < j.size(); i++) collect(j[i], at / i, out);
    }
    json perturb(const json& v) {
        if (!v.is_number_integer()) return edge_[below(edge_.size())];
        const int64_t x = v.is_number_unsigned() ? (int64_t)v.get<uint64_t>() : v.get<int64_t>();
        switch (below(6)) {
            case 0: return json(x + 1);
            case 1: return json(x - 1);
            case 2: return json((int64_t)((uint64_t)x * 2));
            case 3: return json(-x);
            case 4: return json((int64_t)((uint64_t)x + (1ull << 32)));
            default: return json((uint64_t)x ^ (1ull << below(64)));
        }
    }
    std::mt19937_64 rng_;
    std::vector<json> edge_;
};

// A real checkpoint to mutate: tiny's shape, bf16 (bf16 weights, an fp32 master, m, v: four kinds of piece),
// saved after one step.
struct CheckpointFixture {
    LlamaConfig config = preset("tiny");
    std::string dir, step;
    json meta;
    std::unique_ptr<Model> model;
    std::unique_ptr<AdamW> optim;
    CheckpointContext ctx;

    CheckpointFixture() {
        config.vocab = 256;
        dir = scratch_dir("ckpt");
        ModelOptions o;
        o.precision = Precision::named("bf16");
        model = std::make_unique<Model>(config, Device::cpu, 7, o);
        optim = make_adamw(*model, AdamWConfig{2e-3f, 0.9f, 0.95f, 1e-8f, 0.1f});
        ctx.model = config;
        ctx.precision = model->precision();
        ctx.global_batch = 8, ctx.seq = 16, ctx.seed = 7, ctx.data = "addition";
        ctx.lr = LRSchedule{2e-3f, 1e-3f, 2, 10};
        ctx.adamw = optim->cfg;
        {
            Checkpointer ck(CheckpointOptions{dir, 1, 24, 0, false}, *model, *optim, ctx, GridCoords{}, nullptr,
                            CheckpointExtras{});
            ck.after_step(1, 0.01, false);
            ck.finish();
        }
        step = (fs::path(dir) / step_dir_name(1)).string();
        meta = json::parse(read_all(metadata_path()));
    }
    ~CheckpointFixture() { fs::remove_all(dir); }
    std::string metadata_path() const { return (fs::path(step) / "metadata.json").string(); }
    std::string checksum_path() const { return (fs::path(step) / kMetadataChecksumFile).string(); }

    // metadata.json's text and, when `checksum`, the checksum file of that text (as the saver writes it, without
    // the fsyncs: thousands of cases)
    void write(const std::string& text, bool checksum = true) const {
        write_all(metadata_path(), text);
        if (checksum) write_all(checksum_path(), metadata_checksum_line(text));
    }
    void restore() const { write(meta.dump(1)); }

    // a --resume of the folder as it is now: "" when it loads, else the message (any other exception fails)
    std::string load() {
        try {
            load_checkpoint(step, *model, *optim, ctx);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
};

// the "loss_scaler" an fp16 run of chapters 01-09 saved before fp16 moved to chapter 11 (the saver now writes null)
const json kOlderScaler = {{"scale", 32768.0}, {"clean_steps", 3}, {"skipped", 1}};

// rank 0's shard of the fixture's checkpoint
uint64_t shard_bytes(const json& m) { return m["shards"][0]["bytes"].get<uint64_t>(); }

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("fuzz: crafted checkpoint metadata is refused naming metadata.json, the key and the rule") {
    CheckpointFixture f;
    REQUIRE(f.load() == "");
    const json& m = f.meta;
    const int64_t rows = m["shards"][0]["pieces"][0]["rows"], cols = m["shards"][0]["pieces"][0]["cols"];
    const std::string p0 = "/shards/0/pieces/0/";  // a param piece: bf16 loads its weights from the master
    size_t first_master = 0;
    while (m["shards"][0]["pieces"][first_master]["kind"] != "master") first_master++;
    const std::string pm = strfmt("/shards/0/pieces/%zu/", first_master);  // a piece the load reads
    struct Row {
        std::string pointer;  // the key set, or removed when value is "<remove>"
        json value;
        std::string want;  // in the message (with the path of metadata.json, always checked)
    };
    const std::vector<Row> rows_ = {
        // offsets and sizes: the wrap of issue 30 and its neighbours
        {p0 + "offset", k2_64_minus_8, "\"shards[0].pieces[0].offset\" is 18446744073709551608: the "},
        {pm + "offset", k2_64_minus_8, strfmt("\"shards[0].pieces[%zu].offset\" is 18446744073709551608: the ", first_master)},
        {p0 + "offset", UINT64_MAX, "run past the end of rank_00000.bin"},
        {p0 + "offset", shard_bytes(m), "run past the end of rank_00000.bin"},
        {p0 + "offset", -8, "\"shards[0].pieces[0].offset\" must be an integer in [0, 18446744073709551615], is the integer -8"},
        {p0 + "offset", 1.5, "offset\" must be an integer in [0, 18446744073709551615], is the number 1.5"},
        {p0 + "offset", "0", "offset\" must be an integer in [0, 18446744073709551615], is the string \"0\""},
        {p0 + "offset", 1e30, "offset\" must be an integer"},
        {p0 + "offset", "<remove>", "\"shards[0].pieces[0].offset\" is missing"},
        {p0 + "count", -1, "\"shards[0].pieces[0].count\" must be an integer in [0, "},
        {p0 + "count", rows * cols + 1, "\"shards[0].pieces[0].count\" must be an integer in [0, "},
        {p0 + "begin", rows * cols, "does not fit its"},
        {p0 + "begin", INT64_MIN, "\"shards[0].pieces[0].begin\" must be an integer in [0, "},
        {p0 + "rows", 0, "\"shards[0].pieces[0].rows\" must be an integer in [1, 2147483647], is the integer 0"},
        {p0 + "rows", 2147483648ll, "\"shards[0].pieces[0].rows\" must be an integer in [1, 2147483647]"},
        {p0 + "cols", 1099511627776ll, "\"shards[0].pieces[0].cols\" must be an integer in [1, 2147483647]"},
        {p0 + "row0", -1, "\"shards[0].pieces[0].row0\" must be an integer in [0, 2147483647]"},
        {p0 + "col0", UINT64_MAX, "\"shards[0].pieces[0].col0\" must be an integer in [0, 2147483647]"},
        {p0 + "kind", "weights", "\"shards[0].pieces[0].kind\" is \"weights\", not param, master, m, v or state"},
        {p0 + "kind", 0, "\"shards[0].pieces[0].kind\" must be a string, is the integer 0"},
        {p0 + "dtype", "f64", "\"shards[0].pieces[0].dtype\" is \"f64\", not f32, bf16 or f16"},
        {p0 + "dtype", nullptr, "\"shards[0].pieces[0].dtype\" must be a string, is null"},
        {p0 + "tensor", "model.nope", "\"shards[0].pieces[0].tensor\" is model.nope, which \"tensors\" does not list"},
        {p0 + "tensor", "<remove>", "\"shards[0].pieces[0].tensor\" is missing"},
        {p0 + "crc32", 4294967296ll, "\"shards[0].pieces[0].crc32\" must be an integer in [0, 4294967295]"},
        {"/shards/0/pieces/0", json::array(), "\"shards[0].pieces[0]\" must be an object, is an array of 0"},
        {"/shards/0/pieces", "x", "\"shards[0].pieces\" must be an array, is the string \"x\""},
        // shard entries
        {"/shards/0/bytes", UINT64_MAX, "\"shards[0].bytes\" must be an integer in [0, 9223372036854775807]"},
        {"/shards/0/bytes", shard_bytes(m) + 1, "truncated"},
        {"/shards/0/bytes", shard_bytes(m) - 1, "it has bytes no piece accounts for"},
        {"/shards/0/file", "../../../etc/passwd", "\"shards[0].file\" is \"../../../etc/passwd\", not the name of a file"},
        {"/shards/0/file", "rank_00007.bin", "rank_00007.bin (rank 0) is missing"},
        {"/shards/0/file", ".", "not the name of a file in the step folder"},
        {"/shards/0/rank", 1, "\"shards[0].rank\" must be 0 (the shards are listed in rank order)"},
        {"/shards/0/rank", -1, "\"shards[0].rank\" must be an integer in [0, 2147483647], is the integer -1"},
        {"/shards/0/crc32", -1, "\"shards[0].crc32\" must be an integer in [0, 4294967295]"},
        {"/shards/0/coords", 5, "\"shards[0].coords\" must be an object, is the integer 5"},
        {"/shards/0/coords", nested(kJsonMaxDepth + 8), "is nested deeper than 32 levels"},
        {"/shards", json::array(), "\"shards\" lists 0 shards, but layout.world is 1"},
        {"/shards", json::object(), "\"shards\" must be an array, is an object of 0 keys"},
        {"/shards", "<remove>", "\"shards\" is missing"},
        // the step and the data position: "load_batch: first id -12" before
        {"/step", -12, "\"step\" must be an integer in [0, 9223372036854775807], is the integer -12"},
        {"/step", "5", "\"step\" must be an integer in [0, 9223372036854775807], is the string \"5\""},
        {"/step", 2, "\"data.samples_seen\" is 8, but step 2 × global_batch 8 is 16"},
        {"/step", 4611686018427387904ll, "× global_batch 8 is past 2^63"},
        {"/data/samples_seen", -8, "\"data.samples_seen\" must be an integer in [0, "},
        {"/data/global_batch", 0, "\"data.global_batch\" must be an integer in [1, "},
        {"/data/seq", 1099511627776ll, "\"data.seq\" must be an integer in [1, 2147483647]"},
        {"/data/data", 5, "\"data.data\" must be a string, is the integer 5"},
        // the header, the model, the layout, the run's scalars
        {"/format", "safetensors", "\"format\" is \"safetensors\", expected \"pentatron-checkpoint\""},
        {"/format", "<remove>", "\"format\" is missing"},
        {"/version", 3, "\"version\" must be an integer in [1, 2], is the integer 3"},
        {"/version", "2", "\"version\" must be an integer in [1, 2], is the string \"2\""},
        {"/model/hidden", "64", "\"model.hidden\" must be an integer in [0, 2147483647], is the string \"64\""},
        {"/model/hidden", 64.0, "\"model.hidden\" must be an integer in [0, 2147483647], is the number 64.0"},
        {"/model/vocab", -256, "\"model.vocab\" must be an integer in [0, 2147483647]"},
        {"/model/tied_embeddings", "yes", "\"model.tied_embeddings\" must be true or false, is the string \"yes\""},
        {"/model/name", json::array(), "\"model.name\" must be a string"},
        {"/model", "<remove>", "\"model\" is missing"},
        {"/precision/policy", 1, "\"precision.policy\" must be a string"},
        {"/layout/world", 0, "\"layout.world\" must be an integer in [1, 2147483647], is the integer 0"},
        {"/layout/tp", 1099511627776ll, "\"layout.tp\" must be an integer in [1, 2147483647]"},
        {"/rng/seed", 1.5, "\"rng.seed\" must be an integer"},
        {"/lr_schedule/total", "10", "\"lr_schedule.total\" must be an integer"},
        {"/optimizer/step_count", 2147483648ll, "\"optimizer.step_count\" must be an integer in [0, 2147483647]"},
        {"/optimizer/step_count", -1, "\"optimizer.step_count\" must be an integer in [0, 2147483647]"},
        {"/loss_scaler/scale", 0, "\"loss_scaler.scale\" is 0, not a float > 0"},
        {"/loss_scaler/scale", 1e300, "\"loss_scaler.scale\" is 1e+300, not a float > 0"},
        {"/loss_scaler/scale", "big", "\"loss_scaler.scale\" must be a finite number, is the string \"big\""},
        {"/loss_scaler/skipped", -1, "\"loss_scaler.skipped\" must be an integer in [0, "},
        {"/loss_scaler", 5, "\"loss_scaler\" must be an object, is the integer 5"},
        // the tensors' global shapes
        {"/tensors/model.norm.weight", json::array(), "\"tensors.model.norm.weight\" must list 1 to 8 sizes, is empty"},
        {"/tensors/model.norm.weight", json::array({0}), "\"tensors.model.norm.weight[0]\" must be an integer in [1, 2147483647]"},
        {"/tensors/model.norm.weight", json::array({4294967296ll, 4294967296ll}), "\"tensors.model.norm.weight[0]\" must be an integer in [1, 2147483647]"},
        {"/tensors/model.norm.weight", json::array({1, 1, 1, 1, 1, 1, 1, 1, 1}), "\"tensors.model.norm.weight\" has 9 elements, at most 8 are allowed"},
        {"/tensors/model.norm.weight", "x", "\"tensors.model.norm.weight\" must be an array, is the string \"x\""},
        {"/tensors/model.norm.weight", json::array({33}), "a checkpoint of another model: model.norm.weight is (33) there, (32) here"},
        {"/tensors", json::array(), "\"tensors\" must be an object, is an array of 0"},
        {"/model/n_layers", 3, "a checkpoint of another model: n_layers is 3 in the checkpoint"},
    };
    int n = 0;
    for (const Row& r : rows_) {
        CAPTURE(r.pointer);
        CAPTURE(r.value.dump());
        json j = m;
        j["loss_scaler"] = kOlderScaler;  // what an fp16 run saved before fp16 moved to chapter 11
        const json::json_pointer at(r.pointer);
        if (r.value == "<remove>") j[at.parent_pointer()].erase(at.back());
        else j[at] = r.value;
        f.write(j.dump(1));
        const std::string e = f.load();
        CHECK(contains(e, f.step));
        CHECK(contains(e, r.want));
        n++;
    }
    // the text itself, and the checksum beside it
    struct TextRow {
        std::string text, checksum;  // checksum "" : the checksum file of the text; "<none>": no checksum file
        std::string want;
    };
    const std::string good = m.dump(1);
    const std::vector<TextRow> text_rows = {
        {"{\"format\": ", "", "metadata.json is not valid JSON"},
        {"", "", "metadata.json is not valid JSON"},
        {"[1, 2]", "", "metadata.json: must be an object, is an array of 2"},
        {"{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}", "", "is nested deeper than 32 levels"},
        {good + " ", metadata_checksum_line(good), "metadata.json is damaged or was edited: its CRC-32 is"},
        {good, "zz", "metadata.json.crc32 must start with the 8 hex digits"},
        {good, "<none>", "metadata.json.crc32 is missing; every version-2 checkpoint has one"},
    };
    for (const TextRow& r : text_rows) {
        CAPTURE(r.want);
        write_all(f.metadata_path(), r.text);
        fs::remove(f.checksum_path());
        if (r.checksum != "<none>") write_all(f.checksum_path(), r.checksum.empty() ? metadata_checksum_line(r.text) : r.checksum);
        const std::string e = f.load();
        CHECK(contains(e, f.step));
        CHECK(contains(e, r.want));
        n++;
    }
    // legal: a version-1 checkpoint (written before the checksum) without one; an older fp16 run's loss scaler
    json v1 = m;
    v1["version"] = 1;
    f.write(v1.dump(1), false);
    fs::remove(f.checksum_path());
    CHECK(f.load() == "");
    json older = m;
    older["loss_scaler"] = kOlderScaler;  // checked, then left alone: no program of chapters 01-09 scales its loss
    f.write(older.dump(1));
    CHECK(f.load() == "");
    std::printf("fuzz: %d crafted metadata.json cases refused naming the file and the rule, 2 legal ones load\n", n);
    CHECK(n == (int)(rows_.size() + text_rows.size()));
}

TEST_CASE("fuzz: 2400 seeded random mutations of metadata.json: each loads or is refused naming the file") {
    CheckpointFixture f;
    REQUIRE(f.load() == "");
    Mutator mut(20260530);
    const std::string good = f.meta.dump(1);
    int loaded = 0, refused = 0, checksum = 0, other = 0;
    for (int i = 0; i < 2400; i++) {
        CAPTURE(i);
        std::string text;
        const bool raw = i % 4 == 3;  // a quarter: byte edits of the text, the checksum left as it was
        if (raw) {
            text = mut.mutate_bytes(good);
            write_all(f.metadata_path(), text);
            write_all(f.checksum_path(), metadata_checksum_line(good));
        } else {
            json j = f.meta;
            for (uint64_t k = 0, edits = 1 + mut.below(3); k < edits; k++) mut.mutate(j);
            text = j.dump(1);
            f.write(text);
        }
        std::string e;
        try {
            e = f.load();
        } catch (const std::exception& x) {
            FAIL_CHECK("not a penta::Error: " << x.what() << " (metadata.json: " << text.substr(0, 2000) << ")");
            other++;
            continue;
        }
        if (e.empty()) {
            loaded++;
            CHECK_MESSAGE((!raw || text == good), "a byte edit passed the checksum");
            continue;
        }
        refused++;
        if (contains(e, "is damaged or was edited")) checksum++;
        CHECK_MESSAGE(contains(e, f.step), e << " (metadata.json: " << text.substr(0, 2000) << ")");
        if (raw && text != good) CHECK_MESSAGE(contains(e, "is damaged or was edited"), e);
    }
    std::printf("fuzz: 2400 mutations of metadata.json (seed 20260530): %d loaded (legal edits), %d refused naming "
                "the file (%d of them by the checksum), %d other exceptions, no signal\n", loaded, refused, checksum,
                other);
    CHECK(refused > loaded);  // the mutations reach the checks (a generator that changed nothing would not)
}

TEST_CASE("fuzz: crafted and mutated safetensors headers are refused naming the file") {
    const std::string dir = scratch_dir("st"), path = (fs::path(dir) / "model.safetensors").string();
    // four tensors of the format's dtypes; the data bytes are 0..255 repeating
    const SafetensorsPlan plan = plan_safetensors({{"a", DType::f32, {3, 4}}, {"b", DType::bf16, {5}},
                                                   {"c", DType::f16, {2, 2}}, {"d", DType::i32, {7}}},
                                                  {{"format", "pt"}});
    std::string data(plan.file_bytes - plan.header.size(), '\0');
    for (size_t i = 0; i < data.size(); i++) data[i] = (char)i;
    const json header = json::parse(plan.header.substr(8));
    // a file of the header's JSON text (its length prefix from the text, or `length`) and the data
    auto file_of = [&](const std::string& text, const std::string& body, std::optional<uint64_t> length = {}) {
        const uint64_t n = length ? *length : text.size();
        std::string bytes;
        for (int i = 0; i < 8; i++) bytes.push_back((char)((n >> (8 * i)) & 0xff));
        return bytes + text + body;
    };
    // opens the file and reads every tensor's bytes (an offset past the mapping would fault here)
    auto open = [&](const std::string& bytes) -> std::string {
        write_all(path, bytes);
        try {
            SafetensorsFile st(path);
            uint64_t sum = 0;
            for (const SafeTensor& t : st.tensors())
                for (uint64_t b = 0; b < t.end - t.begin; b++) sum += st.data(t)[b];
            (void)sum;
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    REQUIRE(open(file_of(header.dump(), data)) == "");
    struct Row {
        std::string text;
        std::optional<uint64_t> length;  // the length prefix; none: the text's
        std::string want;
    };
    auto with = [&](const std::string& pointer, const json& v) {
        json h = header;
        h[json::json_pointer(pointer)] = v;
        return h.dump();
    };
    const std::vector<Row> rows = {
        {header.dump(), k2_64_minus_8, "the header length 18446744073709551608 runs past the end of the file"},
        {header.dump(), 0, "model.safetensors: the header is not valid JSON"},
        {header.dump(), 1, "model.safetensors: the header is not valid JSON"},
        {with("/a/shape", {4294967296ll, 4294967296ll, 4294967296ll}), {}, "tensor 'a': shape [4294967296,4294967296,4294967296] overflows a 64-bit byte count"},
        {with("/a/shape", {9223372036854775808ull}), {}, "tensor 'a': shape [9223372036854775808] overflows"},
        {with("/a/shape", {-1, -12}), {}, "tensor 'a': shape [-1,-12] must hold sizes >= 0"},
        {with("/a/shape", {1.5}), {}, "must hold sizes >= 0"},
        {with("/a/shape", nested(20)), {}, "tensor 'a': shape " + nested(20).dump() + " must hold sizes >= 0"},
        // a million levels: built as text (a json value that deep cannot even be copied or dumped: the stack)
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": " + std::string(1000000, '[') + std::string(1000000, ']') +
             ", \"data_offsets\": [0, 48]}}", {}, "model.safetensors: the header is nested deeper than 32 levels"},
        {with("/a/shape", {3, 5}), {}, "tensor 'a': shape (3, 5) of F32 is 60 bytes, but data_offsets [0, 48] hold 48"},
        {with("/a/data_offsets", {k2_64_minus_8, UINT64_MAX}), {}, "tensor 'a': data_offsets [18446744073709551608, 18446744073709551615] run past the"},
        {with("/a/data_offsets", {0, UINT64_MAX}), {}, "run past the"},
        {with("/a/data_offsets", {48, 0}), {}, "tensor 'a': data_offsets [48, 0] end before they begin"},
        {with("/a/data_offsets", {-48, 0}), {}, "data_offsets [-48,0] must be [BEGIN, END], two integers >= 0"},
        {with("/a/data_offsets", {"0", 48}), {}, "must be [BEGIN, END], two integers >= 0"},
        {with("/a/data_offsets", {0, 48, 96}), {}, "must be [BEGIN, END]"},
        {with("/b/data_offsets", {40, 50}), {}, "overlap"},
        {with("/a/data_offsets", {2, 50}), {}, "bytes before tensor 'a' belong to no tensor"},
        {with("/a/dtype", "F33"), {}, "tensor 'a': dtype \"F33\" is not a safetensors dtype"},
        {with("/a/dtype", 4), {}, "tensor 'a': dtype must be a string"},
        {with("/a/dtype", "F64"), {}, "tensor 'a': shape (3, 4) of F64 is 96 bytes, but data_offsets [0, 48] hold 48"},
        {with("/a", 5), {}, "tensor 'a' needs dtype, shape and data_offsets"},
        {with("/__metadata__", json::array()), {}, "__metadata__ must be an object of strings"},
        {with("/__metadata__/format", 1), {}, "__metadata__ \"format\" must be a string"},
        {"[1]", {}, "the header must be a JSON object"},
        {"{\"a\": \"\xff\xfe\"}", {}, "the header is not valid JSON"},
    };
    int n = 0;
    for (const Row& r : rows) {
        CAPTURE(r.want);
        const std::string e = open(file_of(r.text, data, r.length));
        CHECK(contains(e, path));
        CHECK(contains(e, r.want));
        n++;
    }
    CHECK(contains(open("abc"), "shorter than the 8-byte header length"));
    CHECK(contains(open(file_of(header.dump(), data.substr(0, data.size() - 1))), "run past the"));
    CHECK(contains(open(file_of(header.dump(), data + "x")), "trailing bytes"));
    n += 3;
    // seeded mutations: of the JSON (the length prefix rewritten), and of the file's bytes as a whole
    Mutator mut(20260531);
    const std::string good = file_of(header.dump(), data);
    int loaded = 0, refused = 0, other = 0;
    for (int i = 0; i < 2400; i++) {
        CAPTURE(i);
        std::string bytes;
        if (i % 3 == 2) {
            bytes = mut.mutate_bytes(good);
        } else {
            json h = header;
            for (uint64_t k = 0, edits = 1 + mut.below(3); k < edits; k++) mut.mutate(h);
            bytes = file_of(h.dump(), data);
        }
        std::string e;
        try {
            e = open(bytes);
        } catch (const std::exception& x) {
            FAIL_CHECK("not a penta::Error: " << x.what());
            other++;
            continue;
        }
        if (e.empty()) {
            loaded++;
            continue;
        }
        refused++;
        CHECK_MESSAGE(contains(e, path), e);
    }
    std::printf("fuzz: safetensors: %d crafted cases refused naming the file; 2400 mutations (seed 20260531): %d "
                "opened (legal edits), %d refused naming the file, %d other exceptions, no signal\n", n, loaded,
                refused, other);
    CHECK(refused > loaded);
    fs::remove_all(dir);
}

}  // TEST_SUITE
