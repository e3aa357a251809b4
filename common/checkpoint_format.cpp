// checkpoint_format.cpp — see checkpoint_format.hpp. The CRC-32 is written by hand (a 256-entry table of the
// reflected polynomial), as small as the idea; the atomic write is the tmp name -> fsync -> rename dance.
#include "checkpoint_format.hpp"

#include "config.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace penta {

namespace {
std::array<uint32_t, 256> crc_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
    }
    return t;
}
}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
    static const std::array<uint32_t, 256> table = crc_table();
    const unsigned char* p = (const unsigned char*)data;
    uint32_t c = crc ^ 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

const char* piece_kind_name(PieceKind k) {
    switch (k) {
        case PieceKind::param: return "param";
        case PieceKind::master: return "master";
        case PieceKind::m: return "m";
        case PieceKind::v: return "v";
        case PieceKind::state: return "state";
    }
    return "?";
}

nlohmann::json to_json(const CheckpointPiece& p) {
    return nlohmann::json{{"tensor", p.tensor}, {"kind", piece_kind_name(p.kind)}, {"dtype", dtype_name(p.dtype)},
                          {"row0", p.row0},     {"col0", p.col0},                  {"rows", p.rows},
                          {"cols", p.cols},     {"begin", p.begin},                {"count", p.count},
                          {"offset", p.offset}, {"crc32", p.crc}};
}

CheckpointPiece piece_from_json(const nlohmann::json& j, const std::string& where) {
    try {
        CheckpointPiece p;
        p.tensor = j.at("tensor").get<std::string>();
        const std::string kind = j.at("kind").get<std::string>(), dt = j.at("dtype").get<std::string>();
        bool known = false;
        for (int k = 0; k < kPieceKinds; k++)
            if (kind == piece_kind_name((PieceKind)k)) p.kind = (PieceKind)k, known = true;
        CHECK(known, "kind \"%s\" is not param, master, m, v or state", kind.c_str());
        CHECK(dt == "f32" || dt == "bf16" || dt == "f16", "dtype \"%s\" is not f32, bf16 or f16", dt.c_str());
        p.dtype = dt == "f32" ? DType::f32 : dt == "bf16" ? DType::bf16 : DType::f16;
        p.row0 = j.at("row0").get<int64_t>(), p.col0 = j.at("col0").get<int64_t>();
        p.rows = j.at("rows").get<int64_t>(), p.cols = j.at("cols").get<int64_t>();
        p.begin = j.at("begin").get<int64_t>(), p.count = j.at("count").get<int64_t>();
        p.offset = j.at("offset").get<uint64_t>(), p.crc = j.at("crc32").get<uint32_t>();
        CHECK(p.rows > 0 && p.cols > 0 && p.begin >= 0 && p.count >= 0 && p.begin + p.count <= p.rows * p.cols,
              "the run [%ld, +%ld) does not fit its %ld x %ld block", (long)p.begin, (long)p.count, (long)p.rows,
              (long)p.cols);
        return p;
    } catch (const nlohmann::json::exception& e) {
        FAIL("%s: a piece is malformed: %s", where.c_str(), e.what());
    } catch (const Error& e) {
        FAIL("%s: piece of %s: %s", where.c_str(), j.value("tensor", std::string("?")).c_str(), e.what());
    }
}

nlohmann::json to_json(const ShardIndex& s) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const CheckpointPiece& p : s.pieces) pieces.push_back(to_json(p));
    return nlohmann::json{{"rank", s.rank}, {"file", s.file},     {"bytes", s.bytes},
                          {"crc32", s.crc}, {"coords", s.coords}, {"pieces", pieces}};
}

ShardIndex shard_from_json(const nlohmann::json& j, const std::string& where) {
    try {
        ShardIndex s;
        s.rank = j.at("rank").get<int>();
        s.file = j.at("file").get<std::string>();
        s.bytes = j.at("bytes").get<uint64_t>();
        s.crc = j.at("crc32").get<uint32_t>();
        s.coords = j.value("coords", nlohmann::json::object());
        for (const nlohmann::json& p : j.at("pieces")) s.pieces.push_back(piece_from_json(p, where + " " + s.file));
        return s;
    } catch (const nlohmann::json::exception& e) {
        FAIL("%s: a shard entry is malformed: %s", where.c_str(), e.what());
    }
}

std::string step_dir_name(int64_t step) { return strfmt("step_%06ld", (long)step); }
std::string rank_file_name(int rank) { return strfmt("rank_%05d.bin", rank); }

void write_file_atomic(const std::string& path, const std::string& bytes) {
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "checkpoint: cannot create %s: %s", tmp.c_str(), std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            FAIL("checkpoint: writing %s failed: %s", tmp.c_str(), std::strerror(err));
        }
        done += (size_t)n;
    }
    const bool synced = ::fsync(fd) == 0;
    const int err = errno;
    ::close(fd);
    if (!synced) ::unlink(tmp.c_str());
    CHECK(synced, "checkpoint: fsync of %s failed: %s", tmp.c_str(), std::strerror(err));
    CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "checkpoint: renaming %s to %s failed: %s", tmp.c_str(),
          path.c_str(), std::strerror(errno));
}

void fsync_dir(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0, "checkpoint: cannot open the folder %s: %s", dir.c_str(), std::strerror(errno));
    const bool ok = ::fsync(fd) == 0;
    const int err = errno;
    ::close(fd);
    CHECK(ok, "checkpoint: fsync of the folder %s failed: %s", dir.c_str(), std::strerror(err));
}

CheckpointFaults CheckpointFaults::from_env(int64_t step) {
    CheckpointFaults f;
    if (const char* s = std::getenv("PENTA_CKPT_SLOW_SECONDS")) f.slow_seconds = std::atof(s);
    if (const char* s = std::getenv("PENTA_CKPT_SLOW_STEP")) f.slow_step = std::atoll(s);
    if (f.slow_step > 0 && f.slow_step != step) f.slow_seconds = 0;
    if (const char* s = std::getenv("PENTA_CKPT_DISK_BYTES")) f.disk_bytes = std::atoll(s);
    return f;
}

int64_t parse_save_every(const std::string& v) {
    if (v == "auto") return -1;
    CHECK(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos, "--save-every %s must be a number of "
          "steps >= 0 (0: only at the end) or auto (√(2 δ M) from the measured save time δ and --mtbf-hours M)",
          v.c_str());
    return parse_integer("--save-every", v, 0, kIntFlagMax);  // as every integer flag: nothing wraps
}

std::string resolve_resume_dir(const std::string& resume, const std::string& save_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string dir = resume;
    if (resume == "latest") {
        CHECK(!save_dir.empty(), "--resume latest: it means --save DIR's latest checkpoint, and no --save is given%s",
              "");
        dir = save_dir;
    }
    if (fs::exists(fs::path(dir) / "latest", ec)) {  // a save folder: the step its pointer names
        std::ifstream in((fs::path(dir) / "latest").string());
        std::string name;
        std::getline(in, name);
        CHECK(!name.empty(), "--resume %s: %s/latest is empty", resume.c_str(), dir.c_str());
        dir = (fs::path(dir) / name).string();
    }
    // a crash while the step `latest` names was saved again (a resumed run) can leave it renamed aside,
    // the new one not yet renamed in (commit_checkpoint): the aside copy is that complete checkpoint
    if (!fs::exists(fs::path(dir) / "metadata.json", ec) && fs::exists(fs::path(dir + ".old") / "metadata.json", ec))
        dir += ".old";
    CHECK(fs::exists(fs::path(dir) / "metadata.json", ec),
          "--resume %s: %s holds no metadata.json (a step folder, a --save folder with a `latest` file, or "
          "`latest` with --save are accepted)%s",
          resume.c_str(), dir.c_str(),
          fs::exists(dir + ".tmp", ec) ? "; its .tmp twin is a save that never finished" : "");
    return dir;
}

}  // namespace penta
