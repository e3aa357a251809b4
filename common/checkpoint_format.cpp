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

CheckpointPiece piece_from_json(const JsonField& j) {
    CheckpointPiece p;
    p.tensor = j.at("tensor").string();
    const JsonField kind = j.at("kind"), dtype = j.at("dtype");
    const std::string k = kind.string(), dt = dtype.string();
    bool known = false;
    for (int i = 0; i < kPieceKinds; i++)
        if (k == piece_kind_name((PieceKind)i)) p.kind = (PieceKind)i, known = true;
    if (!known) kind.fail(strfmt("is \"%s\", not param, master, m, v or state", k.c_str()));
    if (dt != "f32" && dt != "bf16" && dt != "f16") dtype.fail(strfmt("is \"%s\", not f32, bf16 or f16", dt.c_str()));
    p.dtype = dt == "f32" ? DType::f32 : dt == "bf16" ? DType::bf16 : DType::f16;
    // a block's origin and sizes are below 2^31, as a model's dimensions are (kCheckpointMaxDim): so every
    // product of two of them, and the element arithmetic of checkpoint_load.cpp, stays below 2^63
    p.row0 = j.at("row0").integer(0, kCheckpointMaxDim), p.col0 = j.at("col0").integer(0, kCheckpointMaxDim);
    p.rows = j.at("rows").integer(1, kCheckpointMaxDim), p.cols = j.at("cols").integer(1, kCheckpointMaxDim);
    const int64_t block = p.rows * p.cols;
    p.begin = j.at("begin").integer(0, block), p.count = j.at("count").integer(0, block);
    if (p.begin + p.count > block)
        j.fail(strfmt("(a piece of %s): the run [%ld, +%ld) does not fit its %ld x %ld block", p.tensor.c_str(),
                      (long)p.begin, (long)p.count, (long)p.rows, (long)p.cols));
    p.offset = j.at("offset").uinteger(UINT64_MAX);  // checked against its file by the reader (piece_fits)
    p.crc = (uint32_t)j.at("crc32").uinteger(UINT32_MAX);
    return p;
}

nlohmann::json to_json(const ShardIndex& s) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const CheckpointPiece& p : s.pieces) pieces.push_back(to_json(p));
    return nlohmann::json{{"rank", s.rank}, {"file", s.file},     {"bytes", s.bytes},
                          {"crc32", s.crc}, {"coords", s.coords}, {"pieces", pieces}};
}

ShardIndex shard_from_json(const JsonField& j) {
    ShardIndex s;
    s.rank = (int)j.at("rank").integer(0, INT32_MAX);
    const JsonField file = j.at("file");
    s.file = file.string();
    // a name in the step folder: a path elsewhere ("../../x") would read a file the checkpoint does not own
    if (s.file.empty() || s.file == "." || s.file == ".." || s.file.find('/') != std::string::npos)
        file.fail(strfmt("is \"%s\", not the name of a file in the step folder", s.file.c_str()));
    s.bytes = j.at("bytes").uinteger(INT64_MAX);
    s.crc = (uint32_t)j.at("crc32").uinteger(UINT32_MAX);
    if (j.has("coords")) j.at("coords").object();
    s.coords = j.json().value("coords", nlohmann::json::object());
    const JsonField pieces = j.at("pieces");
    for (size_t i = 0, n = pieces.size(); i < n; i++) s.pieces.push_back(piece_from_json(pieces.at(i)));
    return s;
}

bool piece_fits(const CheckpointPiece& p, uint64_t file_bytes) {
    const uint64_t size = dtype_size(p.dtype);
    // offset + count × size <= file_bytes, written so that neither the product nor the sum can wrap
    return (uint64_t)p.count <= file_bytes / size && p.offset <= file_bytes - (uint64_t)p.count * size;
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

std::string metadata_checksum_line(const std::string& bytes) {
    return strfmt("%08x  metadata.json\n", crc32_update(0, bytes.data(), bytes.size()));
}

void write_metadata(const std::string& step_dir, const std::string& bytes) {
    namespace fs = std::filesystem;
    write_file_atomic((fs::path(step_dir) / "metadata.json").string(), bytes);
    write_file_atomic((fs::path(step_dir) / kMetadataChecksumFile).string(), metadata_checksum_line(bytes));
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
