// data.cpp — the datasets of data.hpp: the addition task, token files (llm.c shards, raw uint16, bytes of
// a text file) and the --data factory.
//
// Playbook: "Data parallelism"; ARCHITECTURE.md §6 (a sample is a pure function of its global id).
// Tested by tests/01_single_gpu/test_data.cpp: `build/bin/tests_01 -ts='ch01 np1'`.
#include "data.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>

#include "core.hpp"

namespace penta {

std::string Dataset::render(const int32_t* tokens, int64_t T) const {
    std::string s;
    for (int64_t t = 0; t < T; t++) s += (t ? " " : "") + std::to_string(tokens[t]);
    return s;
}

Batch load_batch(const Dataset& ds, int64_t first_id, int64_t count, int64_t T) {
    CHECK(first_id >= 0 && count >= 0 && T >= 1, "load_batch: first id %ld, count %ld, T %ld", (long)first_id,
          (long)count, (long)T);
    Batch b;
    b.rows = count;
    b.T = T;
    try {
        b.tokens.resize(count * T);
        b.targets.resize(count * T);
    } catch (const std::bad_alloc&) {
        FAIL("out of host memory allocating the batch: %ld sequences × %ld tokens × 8 bytes (tokens and targets) = "
             "%.2f GiB (set by --micro-batch × --grad-accum and --seq)", (long)count, (long)T,
             8.0 * (double)count * (double)T / 1073741824.0);
    }
    for (int64_t r = 0; r < count; r++) ds.get(first_id + r, T, &b.tokens[r * T], &b.targets[r * T]);
    return b;
}

int64_t count_targets(const Batch& b) {
    return std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t != kIgnoreTarget; });
}

std::string render_bytes(const int32_t* tokens, int64_t T) {
    std::string s;
    for (int64_t t = 0; t < T; t++) {
        int32_t c = tokens[t];
        if (c >= 32 && c < 127 && c != '\\') s += (char)c;
        else s += strfmt("\\x%02x", (unsigned)c & 0xffu);
    }
    return s;
}

std::vector<int32_t> argmax_rows(const float* logits, int64_t rows, int64_t V) {
    std::vector<int32_t> out(rows);
    for (int64_t r = 0; r < rows; r++) {
        const float* row = logits + r * V;
        out[r] = (int32_t)(std::max_element(row, row + V) - row);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------
// the addition task

AdditionProblem addition_problem(uint64_t seed, int64_t sample_id, int64_t k) {
    Philox4 r = philox4x32(seed, name_stream("data.addition") + (uint64_t)sample_id, (uint64_t)k);
    AdditionProblem p{(int)(r.v[0] % 100), (int)(r.v[1] % 100)};
    if (sample_id < kHeldOutFirstId) {  // training: a copy problem now and then (data.hpp says why)
        if (r.v[2] % kZeroOperandOneIn == 0) p.a = 0;
        if (r.v[2] % kZeroOperandOneIn == 1) p.b = 0;
    }
    return p;
}

// Fixed width, every number written backwards: 42+17 -> "24+71=950;". Every problem is 10 characters with
// each digit at a fixed place, so the model has to learn the arithmetic (digit i of the answer = digit i
// of a + digit i of b + carry), not where the digits are (data.hpp says why backwards).
std::string addition_text(const AdditionProblem& p) {
    auto backwards = [](std::string digits) {
        std::reverse(digits.begin(), digits.end());
        return digits;
    };
    return backwards(strfmt("%02d", p.a)) + "+" + backwards(strfmt("%02d", p.b)) + "=" +
           backwards(strfmt("%03d", p.a + p.b)) + ";";
}

namespace {

class AdditionDataset : public Dataset {
   public:
    explicit AdditionDataset(uint64_t seed) : seed_(seed) {}
    int32_t vocab_size() const override { return kByteVocab; }
    std::string describe() const override {
        return strfmt("addition (built-in: \"aa+bb=SSS;\", every number written backwards; byte tokens; seed %llu)",
                      (unsigned long long)seed_);
    }
    std::string render(const int32_t* tokens, int64_t T) const override { return render_bytes(tokens, T); }

    void get(int64_t sample_id, int64_t T, int32_t* tokens, int32_t* targets) const override {
        CHECK(sample_id >= 0 && T >= 1, "addition: sample id %ld, T %ld", (long)sample_id, (long)T);
        // T + 1 characters: the inputs and, shifted by one, the targets
        std::string chars;
        std::vector<bool> is_answer;  // answer digits and the ';' that ends them
        for (int64_t k = 0; (int64_t)chars.size() < T + 1; k++) {
            std::string p = addition_text(addition_problem(seed_, sample_id, k));
            size_t eq = p.find('=');
            for (size_t i = 0; i < p.size(); i++) is_answer.push_back(i > eq);
            chars += p;
        }
        for (int64_t t = 0; t < T; t++) {
            tokens[t] = (unsigned char)chars[t];
            targets[t] = is_answer[t + 1] ? (int32_t)(unsigned char)chars[t + 1] : kIgnoreTarget;
        }
    }

   private:
    uint64_t seed_;
};

}  // namespace

TaskAccuracy addition_accuracy(const int32_t* pred, const int32_t* targets, int64_t rows, int64_t T) {
    TaskAccuracy acc;
    for (int64_t r = 0; r < rows; r++) {
        const int32_t* p = pred + r * T;
        const int32_t* y = targets + r * T;
        bool in_answer = false, all_right = true;
        for (int64_t t = 0; t < T; t++) {
            if (y[t] == kIgnoreTarget) {
                in_answer = false;
                continue;
            }
            if (!in_answer) {
                in_answer = true;
                all_right = true;
            }
            all_right = all_right && p[t] == y[t];
            if (y[t] == ';') {  // the answer is complete inside this row: count it
                acc.total++;
                acc.correct += all_right;
                in_answer = false;
            }
        }
    }
    return acc;
}

// ---------------------------------------------------------------------------------------------------
// token files: read-only memory maps, so eight ranks on one node share the page cache instead of
// holding eight copies of the shards

namespace {

struct MappedFile {
    std::string path;
    const uint8_t* data = nullptr;
    size_t size = 0;

    explicit MappedFile(const std::string& p) : path(p) {
        int fd = ::open(p.c_str(), O_RDONLY);
        CHECK(fd >= 0, "cannot open data file '%s': %s", p.c_str(), std::strerror(errno));
        struct stat st;
        CHECK(::fstat(fd, &st) == 0, "cannot stat '%s': %s", p.c_str(), std::strerror(errno));
        if (!S_ISREG(st.st_mode)) {  // mmap would say "No such device" of a directory
            ::close(fd);
            FAIL("data file '%s' is %s, not a regular file", p.c_str(), S_ISDIR(st.st_mode) ? "a directory" : "special");
        }
        size = (size_t)st.st_size;
        if (size > 0) {
            void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
            ::close(fd);
            CHECK(m != MAP_FAILED, "cannot map '%s' (%zu bytes): %s", p.c_str(), size, std::strerror(errno));
            data = (const uint8_t*)m;
        } else {
            ::close(fd);
        }
    }
    ~MappedFile() {
        if (data) ::munmap((void*)data, size);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
};

enum class FileKind { llmc, raw, text };

// One token stream: the files' tokens concatenated in the order given. Sample id -> window start is a
// Philox hash, uniform over [0, N-T-1], so any sample can be read without reading the ones before it.
class TokenFileDataset : public Dataset {
   public:
    TokenFileDataset(FileKind kind, const std::vector<std::string>& paths, uint64_t seed, int32_t vocab)
        : kind_(kind), seed_(seed), vocab_(vocab) {
        for (const auto& p : paths) {
            files_.push_back(std::make_unique<MappedFile>(p));
            const MappedFile& f = *files_.back();
            const uint8_t* tok = f.data;
            int64_t n = 0;
            int width = kind == FileKind::text ? 1 : 2;  // bytes per token
            if (kind == FileKind::llmc) {
                const size_t header = kLlmcHeaderInts * sizeof(int32_t);
                CHECK(f.size >= header, "'%s' is %zu bytes, shorter than the %zu-byte llm.c header", p.c_str(),
                      f.size, header);
                int32_t h[3];
                std::memcpy(h, f.data, sizeof h);
                CHECK(h[0] == kLlmcMagic,
                      "'%s': magic %d is not the llm.c shard magic %d (headerless uint16 tokens: --data raw:%s)",
                      p.c_str(), h[0], kLlmcMagic, p.c_str());
                CHECK(h[1] == kLlmcVersion || h[1] == kLlmcVersion32,
                      "'%s': llm.c shard version %d; versions %d (uint16 tokens) and %d (uint32) are read", p.c_str(),
                      h[1], kLlmcVersion, kLlmcVersion32);
                width = h[1] == kLlmcVersion ? 2 : 4;
                CHECK(width == 4 || vocab_ <= 65536, "'%s': uint16 tokens (version 1), but the vocabulary is %d > 65536",
                      p.c_str(), vocab_);
                n = h[2];
                CHECK(n >= 0 && f.size == header + width * (size_t)n,
                      "'%s': header says %ld tokens (%zu bytes), the file has %zu bytes", p.c_str(), (long)n,
                      header + width * (size_t)std::max<int64_t>(n, 0), f.size);
                tok += header;
            } else if (kind == FileKind::raw) {
                CHECK(f.size % 2 == 0, "'%s': %zu bytes is not a whole number of uint16 tokens", p.c_str(), f.size);
                n = (int64_t)f.size / 2;
            } else {
                n = (int64_t)f.size;
            }
            if (n > 0) parts_.push_back(Part{&f, tok, total_, n, width});  // an empty file adds nothing to the stream
            total_ += n;
        }
        check_tokens();
    }

    int32_t vocab_size() const override { return vocab_; }

    std::string describe() const override {
        static const char* kinds[] = {"llm.c shards", "raw uint16 tokens", "text bytes"};
        return strfmt("%s: %s, %ld tokens, vocabulary %d, seed %llu", kinds[(int)kind_], files_str().c_str(),
                      (long)total_, vocab_, (unsigned long long)seed_);
    }

    std::string render(const int32_t* tokens, int64_t T) const override {
        return kind_ == FileKind::text ? render_bytes(tokens, T) : Dataset::render(tokens, T);
    }

    void get(int64_t sample_id, int64_t T, int32_t* tokens, int32_t* targets) const override {
        CHECK(sample_id >= 0 && T >= 1, "sample id %ld, T %ld", (long)sample_id, (long)T);
        CHECK(total_ >= T + 1, "%s holds %ld tokens; a sample of sequence length %ld needs T+1 = %ld",
              files_str().c_str(), (long)total_, (long)T, (long)(T + 1));
        Philox4 r = philox4x32(seed_, name_stream("data.window"), (uint64_t)sample_id);
        uint64_t start = (((uint64_t)r.v[1] << 32) | r.v[0]) % (uint64_t)(total_ - T);
        // the last part that starts at or before `start`
        size_t f = std::upper_bound(parts_.begin(), parts_.end(), (int64_t)start,
                                    [](int64_t s, const Part& p) { return s < p.start; }) - parts_.begin() - 1;
        for (int64_t i = 0; i <= T; i++) {
            int64_t pos = (int64_t)start + i;
            if (pos - parts_[f].start >= parts_[f].n) f++;  // the window runs into the next file
            const Part& part = parts_[f];
            int32_t tok = token_at(part, pos - part.start);
            // checked at open already; kept because a mapped file another process rewrites changes under us
            // (MAP_PRIVATE copies only the pages we write), and one compare per token costs nothing here
            CHECK(tok < vocab_, "'%s': token %d at index %ld is >= the vocabulary size %d", part.file->path.c_str(),
                  tok, (long)(pos - part.start), vocab_);
            if (i < T) tokens[i] = tok;
            if (i > 0) targets[i - 1] = tok;
        }
    }

   private:
    // Every token id < the vocabulary, in one pass when the files are opened, so a bad shard fails now,
    // naming the file and the first bad index, not at whichever step first samples a bad window. Bytes of a
    // text file are < 256 by construction; a vocabulary of 65536 holds every uint16. The pass reads the
    // files once (that also brings them into the page cache training reads them from); its time is printed
    // when noticeable.
    void check_tokens() const {
        if (kind_ == FileKind::text) return;
        const auto t0 = std::chrono::steady_clock::now();
        for (const Part& part : parts_) {
            if (part.width == 2 && vocab_ >= 65536) continue;  // every uint16 is an id
            uint32_t max = 0;  // a max reduction vectorises; the first bad index is searched only if there is one
            for (int64_t i = 0; i < part.n; i++) max = std::max(max, (uint32_t)token_at(part, i));
            if (max < (uint32_t)vocab_) continue;
            int64_t i = 0;
            while ((uint32_t)token_at(part, i) < (uint32_t)vocab_) i++;
            FAIL("'%s': token %d at index %ld (of %ld) is >= the model's vocabulary size %d (a shard of another "
                 "tokenizer? --model sets the vocabulary)", part.file->path.c_str(), token_at(part, i), (long)i,
                 (long)part.n, vocab_);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > 0.5 && world_rank() == 0)
            std::printf("data: checked %ld token ids < %d in %.1f s\n", (long)total_, vocab_, s);
    }

    struct Part {  // one non-empty file's tokens in the concatenated stream
        const MappedFile* file;
        const uint8_t* tokens;
        int64_t start, n;  // global index of its first token, token count
        int width;         // bytes per token: 1 text, 2 uint16, 4 uint32 (llm.c version 2)
    };
    int32_t token_at(const Part& part, int64_t i) const {
        if (part.width == 1) return part.tokens[i];
        if (part.width == 4) {
            uint32_t v;
            std::memcpy(&v, part.tokens + 4 * i, 4);  // little-endian uint32 (llm.c's Llama 3 shards)
            return (int32_t)std::min<uint32_t>(v, INT32_MAX);
        }
        uint16_t v;
        std::memcpy(&v, part.tokens + 2 * i, 2);  // little-endian uint16, as llm.c writes it
        return v;
    }
    std::string files_str() const {
        if (files_.size() == 1) return "'" + files_[0]->path + "'";
        return strfmt("%zu files ('%s' ...)", files_.size(), files_[0]->path.c_str());
    }

    FileKind kind_;
    uint64_t seed_;
    int32_t vocab_;
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::vector<Part> parts_;
    int64_t total_ = 0;
};

const char* kAcceptedSpecs =
    "accepted: addition | llmc:GLOB[,GLOB...] (llm.c shards) | raw:GLOB[,GLOB...] (uint16 tokens) | "
    "text:FILE (bytes)";

// comma-separated globs -> file names, each glob sorted (shard_000, shard_001, ...)
std::vector<std::string> expand_globs(const std::string& spec, const std::string& list) {
    std::vector<std::string> paths;
    size_t begin = 0;
    while (begin <= list.size()) {
        size_t end = std::min(list.find(',', begin), list.size());
        std::string pattern = list.substr(begin, end - begin);
        begin = end + 1;
        if (pattern.empty()) FAIL("--data %s: empty file name (%s)", spec.c_str(), kAcceptedSpecs);
        glob_t g;
        int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
        if (rc != 0) {
            globfree(&g);
            FAIL("--data %s: no file '%s' (no such file, or the pattern matches nothing)", spec.c_str(),
                 pattern.c_str());
        }
        for (size_t i = 0; i < g.gl_pathc; i++) paths.push_back(g.gl_pathv[i]);  // glob sorts them
        globfree(&g);
    }
    return paths;
}

}  // namespace

std::unique_ptr<Dataset> make_dataset(const std::string& spec, uint64_t seed, int32_t vocab) {
    size_t colon = spec.find(':');
    std::string kind = spec.substr(0, colon), rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
    bool bytes = kind == "addition" || kind == "text";
    if (bytes && vocab > 0 && vocab < kByteVocab)
        FAIL("--data %s uses the byte tokenizer (vocabulary %d), larger than the model's vocabulary %d",
             spec.c_str(), kByteVocab, vocab);
    if (spec == "addition") return std::make_unique<AdditionDataset>(seed);
    if (colon == std::string::npos || rest.empty() || (kind != "llmc" && kind != "raw" && kind != "text"))
        FAIL("--data '%s' is not a dataset (%s)", spec.c_str(), kAcceptedSpecs);
    std::vector<std::string> paths = expand_globs(spec, rest);
    if (kind == "text") {
        CHECK(paths.size() == 1, "--data %s: text: takes one file, the pattern matches %zu", spec.c_str(),
              paths.size());
        return std::make_unique<TokenFileDataset>(FileKind::text, paths, seed, kByteVocab);
    }
    CHECK(kind == "llmc" || vocab <= 65536, "--data %s: uint16 tokens, but the vocabulary is %d > 65536", spec.c_str(),
          vocab);  // an llm.c shard says its width (version 1: uint16, 2: uint32)
    return std::make_unique<TokenFileDataset>(kind == "llmc" ? FileKind::llmc : FileKind::raw, paths, seed,
                                              vocab > 0 ? vocab : 65536);
}

void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
    CHECK(tokens.size() <= (size_t)INT32_MAX, "llm.c shard '%s': %zu tokens do not fit the int32 count",
          path.c_str(), tokens.size());
    std::vector<int32_t> header(kLlmcHeaderInts, 0);
    header[0] = kLlmcMagic;
    header[1] = kLlmcVersion;
    header[2] = (int32_t)tokens.size();
    FILE* f = std::fopen(path.c_str(), "wb");
    CHECK(f, "cannot write '%s': %s", path.c_str(), std::strerror(errno));
    bool ok = std::fwrite(header.data(), sizeof(int32_t), header.size(), f) == header.size() &&
              std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), f) == tokens.size();
    ok = (std::fclose(f) == 0) && ok;
    CHECK(ok, "writing '%s' failed: %s", path.c_str(), std::strerror(errno));
}

}  // namespace penta
