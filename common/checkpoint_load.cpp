// checkpoint_load.cpp — see checkpoint_load.hpp.
#include "checkpoint_load.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace penta {

namespace fs = std::filesystem;

struct CheckpointReader::Shard {
    ShardIndex index;
    std::string path;
    const char* map = nullptr;  // the whole file, mapped on first use
    size_t size = 0;
    std::vector<bool> checked;  // per piece: its CRC was verified
    ~Shard() {
        if (map) ::munmap((void*)map, size);
    }
};

namespace {

std::string read_whole(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(!in.bad(), "checkpoint: reading %s failed: %s", path.c_str(), std::strerror(errno));
    return bytes;
}

// metadata.json's bytes against metadata.json.crc32 (checkpoint_format.hpp); a checkpoint without the file
// passes here, and the caller accepts that only of a version-1 checkpoint (written before there was one)
bool check_metadata_checksum(const std::string& step_dir, const std::string& mp, const std::string& bytes) {
    const std::string cp = (fs::path(step_dir) / kMetadataChecksumFile).string();
    std::error_code ec;
    if (!fs::exists(cp, ec)) return false;
    const std::string line = read_whole(cp), want = metadata_checksum_line(bytes);
    CHECK(line.size() >= 8 && line.find_first_not_of("0123456789abcdef") >= 8,
          "checkpoint %s: %s must start with the 8 hex digits of metadata.json's CRC-32 (it is damaged)", mp.c_str(),
          cp.c_str());
    CHECK(line.compare(0, 8, want, 0, 8) == 0,
          "checkpoint %s is damaged or was edited: its CRC-32 is %.8s, %s says %.8s (a file edited by "
          "hand needs its checksum rewritten: docs/CHECKPOINTS.md)", mp.c_str(), want.c_str(), cp.c_str(), line.c_str());
    return true;
}

// Every field of metadata.json that any reader uses (this file, check_compatible, load_checkpoint, the resume
// report of train_loop.cpp), checked for its type and range once, here: a later .at() or get<> cannot throw a
// bare json error, nor a wrapped integer reach an index. Throws naming the file and the key.
void check_metadata(const JsonField& root) {
    const JsonField model = root.at("model");
    model.at("name").string();
    for (const char* key : {"vocab", "hidden", "n_layers", "n_heads", "n_kv_heads", "ffn", "head_dim", "n_experts"})
        model.at(key).integer(0, kCheckpointMaxDim);
    model.at("tied_embeddings").boolean();
    root.at("precision").at("policy").string();
    const JsonField layout = root.at("layout");
    for (const char* key : {"world", "dp", "pp", "cp", "tp", "ep"}) layout.at(key).integer(1, INT32_MAX);
    const JsonField data = root.at("data");
    data.at("data").string();
    const int64_t global_batch = data.at("global_batch").integer(1, INT64_MAX);
    data.at("seq").integer(1, kCheckpointMaxDim);
    // the data position: sample g of step s is s·G + g, so the samples seen are step × G, and a product that
    // wraps (a huge step) is no position at all
    const int64_t step = root.at("step").integer(0, INT64_MAX), seen = data.at("samples_seen").integer(0, INT64_MAX);
    int64_t product = 0;
    const bool wraps = __builtin_mul_overflow(step, global_batch, &product);
    if (wraps || product != seen)
        data.at("samples_seen").fail(strfmt("is %ld, but step %ld × global_batch %ld is %s: the data position and "
                                            "the step disagree", (long)seen, (long)step, (long)global_batch,
                                            wraps ? "past 2^63" : std::to_string(product).c_str()));
    root.at("rng").at("seed").integer(INT64_MIN, INT64_MAX);
    root.at("lr_schedule").at("total").integer(0, INT64_MAX);
    root.at("optimizer").at("step_count").integer(0, INT32_MAX);
    if (root.has("loss_scaler") && !root.at("loss_scaler").json().is_null()) {
        const JsonField ls = root.at("loss_scaler");
        const double scale = ls.at("scale").number();
        if (!(scale > 0 && scale <= FLT_MAX)) ls.at("scale").fail(strfmt("is %g, not a float > 0", scale));
        ls.at("clean_steps").integer(0, INT64_MAX);
        ls.at("skipped").integer(0, INT64_MAX);
    }
    // every tensor's global shape: 1 to 8 sizes in [1, 2^31)
    const JsonField tensors = root.at("tensors");
    tensors.object();
    for (auto it = tensors.json().begin(); it != tensors.json().end(); ++it) {
        const JsonField shape = tensors.at(it.key());
        const size_t n = shape.size(8);
        if (n == 0) shape.fail("must list 1 to 8 sizes, is empty");
        for (size_t d = 0; d < n; d++) shape.at(d).integer(1, kCheckpointMaxDim);
    }
    // one shard per rank of the saving job, in rank order (commit_checkpoint writes them so)
    const JsonField shards = root.at("shards");
    const int64_t world = layout.at("world").integer(1, INT32_MAX);
    if ((int64_t)shards.size() != world)
        shards.fail(strfmt("lists %zu shards, but layout.world is %ld (one a rank)", shards.size(), (long)world));
    for (size_t i = 0; i < shards.size(); i++)
        if (shards.at(i).at("rank").integer(0, INT32_MAX) != (int64_t)i)
            shards.at(i).at("rank").fail(strfmt("must be %zu (the shards are listed in rank order)", i));
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& step_dir) : dir_(step_dir) {
    const std::string mp = (fs::path(step_dir) / "metadata.json").string();
    std::error_code ec;
    CHECK(fs::is_regular_file(mp, ec), "checkpoint %s: metadata.json is missing (a save that never finished has no "
          "metadata)", step_dir.c_str());
    const std::string bytes = read_whole(mp);
    const bool checksummed = check_metadata_checksum(step_dir, mp, bytes);
    meta_ = parse_json_bounded(bytes.data(), bytes.data() + bytes.size(), mp);
    const JsonField root(meta_, mp);
    root.object();
    const JsonField format = root.at("format");
    if (format.string() != kCheckpointFormat)
        format.fail(strfmt("is \"%s\", expected \"%s\" (not a pentatron checkpoint)", format.string().c_str(),
                           kCheckpointFormat));
    version_ = (int)root.at("version").integer(1, kCheckpointVersion);
    // version 2 writes the checksum file: without it the folder lost a file (or metadata.json was replaced)
    CHECK(checksummed || version_ == 1, "checkpoint %s: %s is missing; every version-%d checkpoint has one (a copy "
          "that left it out? docs/CHECKPOINTS.md says how to rewrite it)", mp.c_str(), kMetadataChecksumFile, version_);
    check_metadata(root);
    step_ = meta_.at("step").get<int64_t>();
    const nlohmann::json& tensors = meta_.at("tensors");
    const JsonField shards = root.at("shards");
    for (size_t i = 0; i < shards.size(); i++) {
        auto s = std::make_unique<Shard>();
        s->index = shard_from_json(shards.at(i));
        s->path = (fs::path(step_dir) / s->index.file).string();
        s->checked.assign(s->index.pieces.size(), false);
        struct stat st;
        CHECK(::stat(s->path.c_str(), &st) == 0, "checkpoint %s: shard file %s (rank %d) is missing: %s",
              step_dir.c_str(), s->path.c_str(), s->index.rank, std::strerror(errno));
        CHECK(S_ISREG(st.st_mode), "checkpoint %s: shard file %s (rank %d) is not a regular file", step_dir.c_str(),
              s->path.c_str(), s->index.rank);
        CHECK((uint64_t)st.st_size == s->index.bytes,
              "checkpoint %s: shard file %s is %lld bytes, metadata.json says %llu: %s", step_dir.c_str(),
              s->path.c_str(), (long long)st.st_size, (unsigned long long)s->index.bytes,
              (uint64_t)st.st_size < s->index.bytes ? "truncated" : "it has bytes no piece accounts for");
        for (size_t p = 0; p < s->index.pieces.size(); p++) {
            const CheckpointPiece& pc = s->index.pieces[p];
            const JsonField where = shards.at(i).at("pieces").at(p);
            if (!tensors.contains(pc.tensor))
                where.at("tensor").fail(strfmt("is %s, which \"tensors\" does not list", pc.tensor.c_str()));
            if (!piece_fits(pc, s->index.bytes))
                where.at("offset").fail(strfmt("is %llu: the %ld %s values from there run past the end of %s (%llu bytes)",
                                               (unsigned long long)pc.offset, (long)pc.count, dtype_name(pc.dtype),
                                               s->index.file.c_str(), (unsigned long long)s->index.bytes));
            index_[pc.tensor][(int)pc.kind].push_back({shards_.size(), p});
        }
        shards_.push_back(std::move(s));
    }
}

CheckpointReader::~CheckpointReader() = default;

bool CheckpointReader::has_kind(PieceKind k) const {
    for (const auto& [name, kinds] : index_)
        if (!kinds[(int)k].empty()) return true;
    return false;
}

void CheckpointReader::check_compatible(const CheckpointContext& ctx) const {
    const std::string mp = (fs::path(dir_) / "metadata.json").string();
    const nlohmann::json& m = meta_.at("model");
    const LlamaConfig& c = ctx.model;
    const std::pair<const char*, int64_t> fields[] = {
        {"vocab", c.vocab},         {"hidden", c.hidden},     {"n_layers", c.n_layers},
        {"n_heads", c.n_heads},     {"n_kv_heads", c.n_kv_heads}, {"ffn", c.ffn},
        {"head_dim", c.head_dim()}, {"tied_embeddings", c.tied_embeddings}, {"n_experts", c.moe.experts}};
    for (auto [key, here] : fields) {
        const int64_t there = m.at(key).is_boolean() ? (int64_t)m.at(key).get<bool>() : m.at(key).get<int64_t>();
        CHECK(there == here, "--resume %s: a checkpoint of another model: %s is %ld in the checkpoint (%s), %ld in "
              "--model %s", dir_.c_str(), key, (long)there, m.value("name", std::string("?")).c_str(), (long)here,
              c.name.c_str());
    }
    const nlohmann::json& d = meta_.at("data");
    const std::pair<const char*, int64_t> data_fields[] = {
        {"global_batch", ctx.global_batch}, {"seq", ctx.seq}};
    for (auto [key, here] : data_fields)
        CHECK(d.at(key).get<int64_t>() == here, "--resume %s: the checkpoint was trained with %s %ld, this run has "
              "%ld: the data stream (sample g of step s is s·G + g) would not continue where it stopped",
              dir_.c_str(), key, (long)d.at(key).get<int64_t>(), (long)here);
    CHECK(d.at("data").get<std::string>() == ctx.data, "--resume %s: the checkpoint was trained on --data %s, this "
          "run has --data %s", dir_.c_str(), d.at("data").get<std::string>().c_str(), ctx.data.c_str());
    CHECK(meta_.at("rng").at("seed").get<int64_t>() == ctx.seed, "--resume %s: the checkpoint's --seed is %ld, this "
          "run's %ld: the data would not continue where it stopped", dir_.c_str(),
          (long)meta_.at("rng").at("seed").get<int64_t>(), (long)ctx.seed);
    (void)mp;
}

const char* CheckpointReader::piece_bytes(size_t si, size_t pi) {
    Shard& s = *shards_[si];
    if (!s.map && s.index.bytes > 0) {
        const int fd = ::open(s.path.c_str(), O_RDONLY);
        CHECK(fd >= 0, "checkpoint: cannot open %s: %s", s.path.c_str(), std::strerror(errno));
        void* p = ::mmap(nullptr, s.index.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        const int err = errno;
        ::close(fd);
        CHECK(p != MAP_FAILED, "checkpoint: cannot map %s: %s", s.path.c_str(), std::strerror(err));
        s.map = (const char*)p;
        s.size = s.index.bytes;
    }
    const CheckpointPiece& pc = s.index.pieces[pi];
    const char* data = s.map + pc.offset;
    if (!s.checked[pi]) {
        const uint32_t crc = crc32_update(0, data, pc.nbytes());
        CHECK(crc == pc.crc, "checkpoint: %s is corrupted: piece %s of %s (bytes %llu..%llu) has CRC-32 %08x, "
              "metadata.json says %08x", s.path.c_str(), piece_kind_name(pc.kind), pc.tensor.c_str(),
              (unsigned long long)pc.offset, (unsigned long long)(pc.offset + pc.nbytes()), crc, pc.crc);
        s.checked[pi] = true;
    }
    return data;
}

void CheckpointReader::read_run(const ParamTensor& t, PieceKind k, int64_t begin, int64_t n, float* out) {
    const int64_t row0 = t.row0, col0 = t.shape.size() == 2 ? t.col0 : 0;
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    const int64_t full_rows = t.full_shape[0];
    // the global shape must be the one saved
    const auto saved = meta_.at("tensors").find(t.name);
    CHECK(saved != meta_.at("tensors").end(), "--resume %s: a checkpoint of another model: it has no tensor %s",
          dir_.c_str(), t.name.c_str());
    CHECK(saved->get<Shape>() == t.full_shape, "--resume %s: a checkpoint of another model: %s is %s there, %s here",
          dir_.c_str(), t.name.c_str(), shape_str(saved->get<Shape>()).c_str(), shape_str(t.full_shape).c_str());
    std::fill(out, out + n, 0.0f);
    const auto it = index_.find(t.name);
    const std::vector<std::pair<size_t, size_t>> none;
    const auto& pieces = it == index_.end() ? none : it->second[(int)k];
    int64_t needed = 0, covered = 0;
    for (int64_t e = begin; e < begin + n;) {
        const int64_t r = e / cols, c_lo = e % cols, c_hi = std::min(cols, c_lo + (begin + n - e));
        const int64_t g = row0 + r;  // the global row; its columns [col0 + c_lo, col0 + c_hi)
        if (g < full_rows) needed += c_hi - c_lo;
        for (const auto& [si, pi] : pieces) {
            const CheckpointPiece& p = shards_[si]->index.pieces[pi];
            if (g < p.row0 || g >= p.row0 + p.rows) continue;
            const int64_t gc_lo = std::max(col0 + c_lo, p.col0), gc_hi = std::min(col0 + c_hi, p.col0 + p.cols);
            if (gc_lo >= gc_hi) continue;
            // those columns in the old block's element order, cut to the old piece's run
            int64_t o_lo = (g - p.row0) * p.cols + (gc_lo - p.col0), o_hi = o_lo + (gc_hi - gc_lo);
            o_lo = std::max(o_lo, p.begin), o_hi = std::min(o_hi, p.begin + p.count);
            if (o_lo >= o_hi) continue;
            const int64_t gc_first = p.col0 + (o_lo - (g - p.row0) * p.cols);  // global column of o_lo
            float* dst = out + (r * cols + (gc_first - col0) - begin);
            const char* src = piece_bytes(si, pi) + (o_lo - p.begin) * dtype_size(p.dtype);
            dtype_to_f32(src, p.dtype, dst, o_hi - o_lo);
            if (g < full_rows) covered += o_hi - o_lo;
        }
        e += c_hi - c_lo;
    }
    CHECK(covered == needed, "--resume %s: the checkpoint holds %ld of the %ld elements of %s (%s) this rank needs "
          "(rows %ld.., cols %ld..)%s", dir_.c_str(), (long)covered, (long)needed, t.name.c_str(),
          piece_kind_name(k), (long)(row0 + begin / cols), (long)col0,
          covered > needed ? ": pieces overlap" : "");
}

int64_t load_checkpoint(const std::string& step_dir, Model& model, AdamW& optim, const CheckpointContext& ctx,
                        const CheckpointExtras& extras) {
    CheckpointReader ck(step_dir);
    ck.check_compatible(ctx);
    const ParamLayout& L = model.layout();
    const bool aliased = optim.param.defined() && model.params().defined() && optim.param.buf == model.params().buf;
    // the weights' exact values: the master when the checkpoint has one (rounded to this run's dtype: the same
    // bits as the saved weights when the dtypes agree, AdamW wrote them so; one rounding, not two, when they
    // differ: f16 weights into a bf16 run, or bf16 into fp32), else the weights as saved, converted
    const PieceKind weights = ck.has_kind(PieceKind::master) ? PieceKind::master : PieceKind::param;
    if (model.params().defined()) {
        std::vector<float> host((size_t)model.n_params(), 0.0f);
        for (const ParamTensor& t : L.tensors) ck.read_run(t, weights, 0, t.numel(), host.data() + t.offset);
        store_params(Tensor::from_host(host, {model.n_params()}, Device::cpu), model.params());
    }
    // the optimizer's buffers over its ranges (elements outside every range stay zero)
    auto fill = [&](Tensor& dst, PieceKind k) {
        if (!dst.defined()) return;  // --steps 0 (AdamWConfig::trains false): no master, no moments to fill
        std::vector<float> host((size_t)dst.numel(), 0.0f);
        for (const ParamRange& r : optim.ranges())
            if (r.count > 0) ck.read_run(L.find(r.name), k, r.name_offset, r.count, host.data() + r.offset);
        store_params(Tensor::from_host(host, {dst.numel()}, Device::cpu), dst);
    };
    if (!aliased) fill(optim.param, weights);  // ZeRO-3's shard
    fill(optim.master, weights);  // saved without a master (f32 weights), the weights are the master
    fill(optim.m, PieceKind::m);
    fill(optim.v, PieceKind::v);
    optim.step_count = ck.metadata().at("optimizer").at("step_count").get<int>();
    // a hook's state tensors (checkpoint_state.hpp): every element must be in the checkpoint (read_run says
    // which tensor is not)
    for (const StateTensor& st : extras.state) {
        CHECK(ck.metadata().at("tensors").contains(st.where.name), "--resume %s: the checkpoint holds no %s, state "
              "this run keeps outside the model (a run with other flags saved it: another --moe-balance?)",
              step_dir.c_str(), st.where.name.c_str());
        std::vector<float> host((size_t)st.where.numel(), 0.0f);
        ck.read_run(st.where, PieceKind::state, 0, st.where.numel(), host.data());
        store_params(Tensor::from_host(host, {st.where.numel()}, Device::cpu), *st.values);
    }
    return ck.step();
}

}  // namespace penta
