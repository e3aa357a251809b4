// checkpoint_save.cpp — see checkpoint_save.hpp.
#include "checkpoint_save.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "checkpoint_async.hpp"
#include "metrics.hpp"

namespace penta {

namespace fs = std::filesystem;

nlohmann::json run_metadata(const CheckpointContext& c, int64_t step, int optimizer_steps, int world_size) {
    const LlamaConfig& m = c.model;
    nlohmann::json j;
    j["format"] = kCheckpointFormat;
    j["version"] = kCheckpointVersion;
    j["step"] = step;
    j["model"] = {{"name", m.name},           {"vocab", m.vocab},         {"hidden", m.hidden},
                  {"n_layers", m.n_layers},   {"n_heads", m.n_heads},     {"n_kv_heads", m.n_kv_heads},
                  {"ffn", m.ffn},             {"head_dim", m.head_dim()}, {"tied_embeddings", m.tied_embeddings},
                  {"n_experts", m.moe.experts}, {"n_params", m.n_params()}};
    j["precision"] = {{"param", dtype_name(c.precision.param)}, {"fp32_master", c.precision.fp32_master},
                      {"policy", c.precision.str()}};
    j["layout"] = {{"world", world_size},   {"dp", c.shape.dp}, {"pp", c.shape.pp}, {"cp", c.shape.cp},
                   {"tp", c.shape.tp},      {"ep", c.shape.ep}, {"sp", c.sequence_parallel}};
    // the data position: every sample id below this was trained on; sample g of step s is s·G + g
    j["data"] = {{"data", c.data}, {"global_batch", c.global_batch}, {"seq", c.seq},
                 {"samples_seen", step * c.global_batch}};
    // no stateful generator: init is keyed by (seed, tensor name, element), data by (seed, sample id)
    j["rng"] = {{"seed", c.seed}, {"kind", "counter-based (seed, index): nothing else to restore"}};
    j["lr_schedule"] = {{"max_lr", c.lr.max_lr}, {"min_lr", c.lr.min_lr}, {"warmup", c.lr.warmup},
                        {"total", c.lr.total}, {"next_lr", c.lr.at(step + 1)}};
    j["optimizer"] = {{"name", "adamw"},         {"step_count", optimizer_steps}, {"beta1", c.adamw.beta1},
                      {"beta2", c.adamw.beta2}, {"eps", c.adamw.eps},            {"weight_decay", c.adamw.weight_decay}};
    // fp16's loss scale would be state too, but no program that saves trains in fp16 (chapter 11's comparison
    // keeps no model): the field stays, null, so the format is the one older checkpoints have
    j["loss_scaler"] = nullptr;
    return j;
}

namespace {

// the rank's block of tensor t inside the global one: rows x cols at (row0, col0); a vector is n x 1
void set_block(CheckpointPiece& p, const ParamTensor& t) {
    p.tensor = t.name;
    p.row0 = t.row0;
    p.col0 = t.shape.size() == 2 ? t.col0 : 0;
    p.rows = t.shape[0];
    p.cols = t.shape.size() == 2 ? t.shape[1] : 1;
}

DType stored_dtype(DType d, const char* what) {
    CHECK(d == DType::f32 || d == DType::bf16 || d == DType::f16, "checkpoint: %s in %s cannot be saved (f32, bf16 "
          "or f16 only)", what, dtype_name(d));
    return d;
}

// appends values [first, first + n) of host as a piece of dtype d
void add_piece(CheckpointSnapshot& s, CheckpointPiece p, const std::vector<float>& host, int64_t first, int64_t n,
               DType d) {
    p.dtype = d;
    p.count = n;
    p.offset = s.bytes.size();
    s.bytes.resize(s.bytes.size() + p.nbytes());
    char* out = s.bytes.data() + p.offset;
    // exact both ways for bf16/f16: the values were in d before to_host widened them
    f32_to_dtype(host.data() + first, out, d, n);
    s.pieces.push_back(std::move(p));
}

}  // namespace

CheckpointSnapshot snapshot_state(Model& model, const AdamW& optim, const GridCoords& coords, int rank,
                                  int64_t step, const std::vector<StateTensor>& state) {
    CheckpointSnapshot s;
    s.step = step;
    s.rank = rank;
    s.coords = {{"dp", coords.dp}, {"pp", coords.pp}, {"cp", coords.cp}, {"tp", coords.tp}, {"ep", coords.ep}};
    s.tensors = nlohmann::json::object();
    const ParamLayout& L = model.layout();
    for (const ParamTensor& t : L.tensors) s.tensors[t.name] = t.full_shape;
    // an upper bound of what the pieces take, reserved once: growing a buffer of gigabytes copies it each time
    size_t bound = model.params().defined() ? model.params().nbytes() : optim.param.nbytes();
    bound += (size_t)optim.m.numel() * 4 * (optim.master.defined() ? 3 : 2);
    s.bytes.reserve(bound);
    // the weights: from the flat buffer where the rank holds one (its owner among the replicas writes it),
    // else from the optimizer's shard (ZeRO-3)
    if (model.params().defined()) {
        const DType d = stored_dtype(model.params().dtype, "the weights");
        const std::vector<float> host = model.params().to_host();
        for (const ParamTensor& t : L.tensors) {
            if (!counts_in_grad_norm(t, coords)) continue;
            CheckpointPiece p;
            set_block(p, t);
            p.kind = PieceKind::param;
            add_piece(s, p, host, t.offset, t.numel(), d);
        }
    }
    const bool weights_from_optim = !model.params().defined();
    CHECK(!weights_from_optim || optim.param.defined(), "checkpoint: rank %d holds its weights nowhere (no flat "
          "buffer, no optimizer shard)", rank);
    struct Source {
        PieceKind kind;
        const Tensor* t;
    };
    std::vector<Source> sources;
    if (weights_from_optim) sources.push_back({PieceKind::param, &optim.param});
    if (optim.master.defined()) sources.push_back({PieceKind::master, &optim.master});
    sources.push_back({PieceKind::m, &optim.m});
    sources.push_back({PieceKind::v, &optim.v});
    for (const Source& src : sources) {
        const DType d = src.kind == PieceKind::param ? stored_dtype(src.t->dtype, "the weights") : DType::f32;
        const std::vector<float> host = src.t->to_host();
        for (const ParamRange& r : optim.ranges()) {
            if (!r.in_norm || r.count == 0) continue;  // another rank owns these values
            CHECK(!r.name.empty(), "checkpoint: an optimizer range at %ld has no tensor name", (long)r.offset);
            CheckpointPiece p;
            set_block(p, L.find(r.name));
            p.kind = src.kind;
            p.begin = r.name_offset;
            add_piece(s, p, host, r.offset, r.count, d);
        }
    }
    // a hook's state, by the same owner rule as a parameter replicated alike
    for (const StateTensor& st : state) {
        s.tensors[st.where.name] = st.where.full_shape;
        if (!counts_in_grad_norm(st.where, coords)) continue;
        CheckpointPiece p;
        set_block(p, st.where);
        p.kind = PieceKind::state;
        add_piece(s, p, st.values->to_host(), 0, st.where.numel(), DType::f32);
    }
    return s;
}

std::string shard_index_name(int rank) { return strfmt("rank_%05d.json", rank); }

ShardIndex write_shard(CheckpointSnapshot& snap, const std::string& tmp_dir, const CheckpointFaults& faults) {
    ShardIndex idx;
    idx.rank = snap.rank;
    idx.file = rank_file_name(snap.rank);
    idx.coords = snap.coords;
    const std::string path = (fs::path(tmp_dir) / idx.file).string(), tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "checkpoint: cannot create %s: %s", tmp.c_str(), std::strerror(errno));
    auto fail = [&](const std::string& what, int err) {
        ::close(fd);
        ::unlink(tmp.c_str());
        FAIL("checkpoint: writing %s failed (%s): %s", tmp.c_str(), what.c_str(), std::strerror(err));
    };
    uint64_t written = 0;
    uint32_t file_crc = 0;
    for (size_t i = 0; i < snap.pieces.size(); i++) {
        if (faults.slow_seconds > 0 && i == snap.pieces.size() / 2)
            std::this_thread::sleep_for(std::chrono::duration<double>(faults.slow_seconds));
        CheckpointPiece& p = snap.pieces[i];
        const char* data = snap.bytes.data() + p.offset;
        p.crc = crc32_update(0, data, p.nbytes());
        file_crc = crc32_update(file_crc, data, p.nbytes());
        uint64_t done = 0;
        while (done < p.nbytes()) {
            size_t want = p.nbytes() - done;
            if (faults.disk_bytes >= 0 && written + want > (uint64_t)faults.disk_bytes) {
                want = (uint64_t)faults.disk_bytes > written ? (uint64_t)faults.disk_bytes - written : 0;
                if (want == 0) fail(strfmt("piece %s of %s", piece_kind_name(p.kind), p.tensor.c_str()), ENOSPC);
            }
            const ssize_t n = ::write(fd, data + done, want);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail(strfmt("piece %s of %s", piece_kind_name(p.kind), p.tensor.c_str()), errno);
            done += (uint64_t)n;
            written += (uint64_t)n;
        }
    }
    if (::fsync(fd) != 0) fail("fsync", errno);
    ::close(fd);
    CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "checkpoint: renaming %s failed: %s", tmp.c_str(),
          std::strerror(errno));
    idx.bytes = written;
    idx.crc = file_crc;
    idx.pieces = snap.pieces;
    nlohmann::json j = to_json(idx);
    j["tensors"] = snap.tensors;
    write_file_atomic((fs::path(tmp_dir) / shard_index_name(snap.rank)).string(), j.dump());
    return idx;
}

std::string prepare_step_dir(const std::string& save_dir, int64_t step, Comm* world) {
    const std::string tmp = (fs::path(save_dir) / (step_dir_name(step) + ".tmp")).string();
    std::string error;
    if (world_rank() == 0) {
        std::error_code ec;
        fs::create_directories(save_dir, ec);
        if (!ec) fs::remove_all(tmp, ec);  // a save that crashed at this step before
        if (!ec) fs::create_directory(tmp, ec);
        if (ec) error = strfmt("--save %s: cannot create %s: %s", save_dir.c_str(), tmp.c_str(), ec.message().c_str());
    }
    const double bad = world ? world->all_reduce_scalar(error.empty() ? 0 : 1, ReduceOp::max) : (error.empty() ? 0 : 1);
    if (!error.empty()) FAIL("%s", error.c_str());
    CHECK(bad == 0, "--save %s: rank 0 could not create %s", save_dir.c_str(), tmp.c_str());
    return tmp;
}

namespace {
// --keep K (0: keep all): keeps the step just committed and the K - 1 complete ones before it. Step folders
// after it belong to a future this run abandoned (it resumed from an earlier step): they go, since counting
// them among the K newest would delete the step `latest` names.
void prune(const std::string& save_dir, int64_t committed, int64_t keep) {
    if (keep <= 0) return;
    std::vector<int64_t> older;
    for (const auto& e : fs::directory_iterator(save_dir)) {
        const std::string n = e.path().filename().string();
        if (!e.is_directory() || n.rfind("step_", 0) != 0 || n.find('.') != std::string::npos) continue;
        const int64_t step = std::atoll(n.c_str() + 5);
        if (step > committed) fs::remove_all(e.path());
        else if (step < committed) older.push_back(step);
    }
    std::sort(older.begin(), older.end());
    for (size_t i = 0; i + (keep - 1) < older.size(); i++) fs::remove_all(fs::path(save_dir) / step_dir_name(older[i]));
}
}  // namespace

SavedCheckpoint commit_checkpoint(const std::string& save_dir, int64_t step, const nlohmann::json& run_meta,
                                  const std::string& local_error, Comm* world, int64_t keep, int64_t full_params) {
    const int rank = world_rank(), ranks = world ? world->size() : 1;
    const std::string name = step_dir_name(step);
    const fs::path tmp = fs::path(save_dir) / (name + ".tmp"), final_dir = fs::path(save_dir) / name;
    // every rank learns whether all wrote: the highest failing rank + 1, or 0
    const double failed = world ? world->all_reduce_scalar(local_error.empty() ? 0 : rank + 1, ReduceOp::max)
                                : (local_error.empty() ? 0 : 1);
    if (failed != 0) {
        std::error_code ec;
        if (rank == 0) fs::remove_all(tmp, ec);  // the previous checkpoint and `latest` stay as they were
        if (!local_error.empty())
            FAIL("%s; checkpoint %s not saved, `latest` still names the previous one", local_error.c_str(), name.c_str());
        FAIL("checkpoint %s not saved: rank %d could not write its shard (its message says why); `latest` still "
             "names the previous one", name.c_str(), (int)failed - 1);
    }
    SavedCheckpoint out;
    out.dir = final_dir.string();
    if (rank != 0) return out;
    nlohmann::json meta = run_meta;
    meta["tensors"] = nlohmann::json::object();
    meta["shards"] = nlohmann::json::array();
    for (int r = 0; r < ranks; r++) {
        const fs::path ip = tmp / shard_index_name(r);
        std::ifstream in(ip.string());
        CHECK(in, "checkpoint: %s is missing after every rank reported success", ip.string().c_str());
        nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        CHECK(!j.is_discarded(), "checkpoint: %s is not valid JSON", ip.string().c_str());
        for (auto it = j["tensors"].begin(); it != j["tensors"].end(); ++it) meta["tensors"][it.key()] = it.value();
        j.erase("tensors");
        const ShardIndex s = shard_from_json(JsonField(j, ip.string()));
        out.bytes += s.bytes;
        for (const CheckpointPiece& p : s.pieces) out.kind_bytes[(int)p.kind] += p.nbytes();
        meta["shards"].push_back(j);
    }
    out.bytes_per_param = (double)out.bytes / (double)std::max<int64_t>(full_params, 1);
    meta["bytes"] = out.bytes;
    meta["bytes_per_param"] = out.bytes_per_param;
    write_metadata(tmp.string(), meta.dump(1));  // and its checksum beside it
    for (int r = 0; r < ranks; r++) fs::remove(tmp / shard_index_name(r));  // merged into metadata.json
    fsync_dir(tmp.string());
    // the same step saved again (a resumed run): the old one is renamed aside, not removed, so a crash between
    // the two renames leaves a complete copy that `latest` still finds (resolve_resume_dir takes the .old twin)
    const fs::path aside = fs::path(save_dir) / (name + ".old");
    std::error_code ec;
    if (fs::exists(final_dir, ec)) {
        fs::remove_all(aside, ec);  // a stale aside copy (final_dir is complete)
        fs::rename(final_dir, aside, ec);
        CHECK(!ec, "checkpoint: renaming %s aside to %s failed: %s", final_dir.string().c_str(), aside.string().c_str(),
              ec.message().c_str());
    }
    fs::rename(tmp, final_dir, ec);
    CHECK(!ec, "checkpoint: renaming %s to %s failed: %s", tmp.string().c_str(), final_dir.string().c_str(),
          ec.message().c_str());
    fsync_dir(save_dir);
    write_file_atomic((fs::path(save_dir) / "latest").string(), name + "\n");  // the step is visible from here on
    fsync_dir(save_dir);
    fs::remove_all(aside, ec);
    prune(save_dir, step, keep);
    return out;
}

double optimal_checkpoint_interval(double save_seconds, double mtbf_seconds) {
    return std::sqrt(2.0 * save_seconds * mtbf_seconds);
}

Checkpointer::Checkpointer(CheckpointOptions opt, Model& model, AdamW& optim, CheckpointContext ctx,
                           GridCoords coords, Comm* world, CheckpointExtras extras)
    : opt_(std::move(opt)), model_(model), optim_(optim), ctx_(std::move(ctx)), coords_(coords), world_(world),
      extras_(std::move(extras)), every_(opt_.every) {}

Checkpointer::~Checkpointer() = default;

void Checkpointer::after_step(int64_t step, double step_seconds, bool last) {
    if (opt_.dir.empty()) return;
    const bool save_now = due(step, last);  // before this step is counted: what the loop asked before it
    step_seconds_sum_ += step_seconds;
    steps_seen_++;
    if (pending_step_ > 0) {  // an async save in flight: commit it once every rank's writer is done
        const double mine = writer_->done() ? 0 : 1;
        const double busy = world_ ? world_->all_reduce_scalar(mine, ReduceOp::max) : mine;
        if (busy == 0) commit_pending();
    }
    if (save_now) save(step);
}

bool Checkpointer::due(int64_t step, bool last) const {
    if (opt_.dir.empty()) return false;
    // auto: the first save comes after the first step (none counted yet), and measures δ
    return last || (every_ > 0 && step % every_ == 0) || (every_ < 0 && steps_seen_ == 0);
}

void Checkpointer::save(int64_t step) {
    if (pending_step_ > 0) commit_pending();  // the next save waits for the previous one
    Timer timer;
    const std::string tmp = prepare_step_dir(opt_.dir, step, world_);
    CheckpointSnapshot snap = snapshot_state(model_, optim_, coords_, world_rank(), step, extras_.state);
    const nlohmann::json meta = run_metadata(ctx_, step, optim_.step_count, world_ ? world_->size() : 1);
    const CheckpointFaults faults = CheckpointFaults::from_env(step);
    if (opt_.async) {
        if (!writer_) writer_ = std::make_unique<AsyncShardWriter>();
        writer_->start(std::move(snap), tmp, faults);
        pending_step_ = step;
        pending_meta_ = meta;
        pending_stall_ = timer.seconds();
        if (every_ < 0) choose_interval(pending_stall_, step, "the stall of the async save");  // what a save costs the run
        return;
    }
    std::string error;
    try {
        write_shard(snap, tmp, faults);
    } catch (const Error& e) {
        error = e.what();
    }
    const SavedCheckpoint s =
        commit_checkpoint(opt_.dir, step, meta, error, world_, opt_.keep, ctx_.model.n_params());
    const double seconds = timer.seconds();
    report(s, step, seconds, seconds);
    if (every_ < 0) choose_interval(seconds, step, "the save");
}

void Checkpointer::choose_interval(double seconds, int64_t step, const char* what) {
    // δ: the slowest rank's; the step time agreed likewise, so every rank picks the same interval
    const double delta = world_ ? world_->all_reduce_scalar(seconds, ReduceOp::max) : seconds;
    const double mean = step_seconds_sum_ / std::max<int64_t>(steps_seen_, 1);
    const double step_s = world_ ? world_->all_reduce_scalar(mean, ReduceOp::max) : mean;
    const double tau = optimal_checkpoint_interval(delta, opt_.mtbf_hours * 3600);
    every_ = std::max<int64_t>(1, (int64_t)std::llround(tau / std::max(step_s, 1e-9)));
    if (world_rank() == 0)
        std::printf("--save-every auto: δ = %.4f s (%s of step %ld), M = %g h: √(2δM) = %.1f s = every %ld steps of "
                    "%.4f s\n", delta, what, (long)step, opt_.mtbf_hours, tau, (long)every_, step_s);
}

void Checkpointer::commit_pending() {
    const ShardWriteResult w = writer_->wait();
    const int64_t step = pending_step_;
    pending_step_ = 0;
    const SavedCheckpoint s =
        commit_checkpoint(opt_.dir, step, pending_meta_, w.error, world_, opt_.keep, ctx_.model.n_params());
    report(s, step, pending_stall_, w.seconds);
}

void Checkpointer::finish() {
    if (pending_step_ > 0) commit_pending();
}

void Checkpointer::report(const SavedCheckpoint& s, int64_t step, double stall, double total) {
    if (world_rank() != 0) return;
    const double n = (double)ctx_.model.n_params();
    std::string kinds;
    for (int k = 0; k < kPieceKinds; k++)
        if (s.kind_bytes[k] > 0)
            kinds += strfmt("%s%s %.2f", kinds.empty() ? "" : " + ", piece_kind_name((PieceKind)k), s.kind_bytes[k] / n);
    std::printf("checkpoint: step %ld -> %s, %.2f MB, %.2f bytes/param (%s), ", (long)step, s.dir.c_str(),
                s.bytes / 1e6, s.bytes_per_param, kinds.c_str());
    if (opt_.async)
        std::printf("training stalled %.4f s (the host copy), written in the background in %.3f s (%.1f MB/s)\n", stall, total,
                    s.bytes / 1e6 / std::max(total, 1e-9));
    else
        std::printf("saved in %.3f s (%.1f MB/s)\n", total, s.bytes / 1e6 / std::max(total, 1e-9));
    std::fflush(stdout);
}

}  // namespace penta
