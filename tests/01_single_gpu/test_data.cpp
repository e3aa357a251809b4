// test_data.cpp — datasets: a sample is a pure function of its global id (ARCHITECTURE.md §6), the addition task is
// correct arithmetic with exactly its answers as targets, token files read back what was written, and bad
// inputs fail with a message naming the file.
// Run: build/bin/tests_01 -ts='ch01 np1' -tc='*data*,*addition*,*shard*'
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "../../common/data.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

// a file path in a fresh temporary directory, removed with the object
struct TempDir {
    std::string dir;
    TempDir() {
        char tmpl[] = "/tmp/penta_data_XXXXXX";
        REQUIRE(mkdtemp(tmpl) != nullptr);
        dir = tmpl;
    }
    ~TempDir() {
        std::string cmd = "rm -rf '" + dir + "'";
        if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
    }
    std::string path(const std::string& name) const { return dir + "/" + name; }
};

void write_bytes(const std::string& path, const void* data, size_t n) {
    std::ofstream f(path, std::ios::binary);
    f.write((const char*)data, (std::streamsize)n);
    REQUIRE(f.good());
}

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("data: a sample depends only on its id, however ids are grouped") {
    auto ds = make_dataset("addition", 7, 0);
    const int64_t T = 40;
    Batch whole = load_batch(*ds, 10, 6, T);
    Batch a = load_batch(*ds, 10, 2, T), b = load_batch(*ds, 12, 4, T);  // e.g. two micro-batches
    std::vector<int32_t> joined = a.tokens, joined_t = a.targets;
    joined.insert(joined.end(), b.tokens.begin(), b.tokens.end());
    joined_t.insert(joined_t.end(), b.targets.begin(), b.targets.end());
    CHECK(joined == whole.tokens);
    CHECK(joined_t == whole.targets);
    // the same id twice, and a different id or seed differs
    std::vector<int32_t> x(T), y(T), t(T);
    ds->get(11, T, x.data(), t.data());
    ds->get(11, T, y.data(), t.data());
    CHECK(x == y);
    ds->get(12, T, y.data(), t.data());
    CHECK(x != y);
    make_dataset("addition", 8, 0)->get(11, T, y.data(), t.data());
    CHECK(x != y);
    CHECK(global_sample_id(3, 5, 8) == 29);
}

TEST_CASE("addition samples are correct arithmetic and only answers are targets") {
    auto ds = make_dataset("addition", 1, 256);
    CHECK(ds->vocab_size() == 256);
    CHECK(addition_text({42, 17}) == "24+71=950;");
    CHECK(addition_text({0, 0}) == "00+00=000;");
    CHECK(addition_text({99, 99}) == "99+99=891;");
    const int64_t T = 64;
    int problems = 0;
    for (int64_t id = 0; id < 20; id++) {
        std::vector<int32_t> tok(T), tgt(T);
        ds->get(id, T, tok.data(), tgt.data());
        std::string s = render_bytes(tok.data(), T);
        REQUIRE(s.size() == (size_t)T);
        // targets are the next token exactly where that token is after '=' (answer digits and ';')
        bool after_eq = false;
        for (int64_t t = 0; t + 1 < T; t++) {
            char next = s[t + 1];
            if (s[t] == '=') after_eq = true;
            if (s[t] == ';') after_eq = false;
            CHECK(tgt[t] == (after_eq ? (int32_t)(unsigned char)next : -1));
        }
        // every complete problem: reversed digits '+' reversed digits '=' reversed digits of the sum ';'
        size_t pos = 0;
        while (true) {
            size_t end = s.find(';', pos);
            if (end == std::string::npos) break;
            std::string p = s.substr(pos, end - pos);
            size_t plus = p.find('+'), eq = p.find('=');
            REQUIRE(plus != std::string::npos);
            REQUIRE(eq != std::string::npos);
            auto number = [](std::string digits) {  // least significant digit first
                std::reverse(digits.begin(), digits.end());
                return std::stoi(digits);
            };
            int a = number(p.substr(0, plus)), b = number(p.substr(plus + 1, eq - plus - 1));
            std::string ans = p.substr(eq + 1);
            std::reverse(ans.begin(), ans.end());
            CHECK(a >= 0);
            CHECK(a <= 99);
            CHECK(b <= 99);
            CHECK(std::stoi(ans) == a + b);
            CHECK(p.size() == 9);  // fixed width: "aa+bb=SSS"
            CHECK(plus == 2);
            problems++;
            pos = end + 1;
        }
    }
    CHECK(problems > 60);
}

TEST_CASE("addition: a quarter of training problems have a zero operand, held-out ones are uniform") {
    // data.hpp: 1 in kZeroOperandOneIn training problems a = 0, another 1 in kZeroOperandOneIn b = 0 (the copy
    // problems that lead off the plateau); evaluation's ids (from kHeldOutFirstId) draw a and b uniformly
    const int n = 40000;
    auto zero_share = [&](int64_t first_id, int* a_zero, int* b_zero) {
        *a_zero = *b_zero = 0;
        for (int i = 0; i < n; i++) {
            AdditionProblem p = addition_problem(5, first_id + i / 4, i % 4);
            *a_zero += p.a == 0;
            *b_zero += p.b == 0;
        }
    };
    int a0, b0;
    zero_share(0, &a0, &b0);
    const double expect = 1.0 / kZeroOperandOneIn + (1.0 - 1.0 / kZeroOperandOneIn) / 100;  // planted + natural
    CHECK(std::abs(a0 / (double)n - expect) < 0.01);
    CHECK(std::abs(b0 / (double)n - expect) < 0.01);
    zero_share(kHeldOutFirstId, &a0, &b0);
    CHECK(std::abs(a0 / (double)n - 0.01) < 0.004);  // a uniform digit pair is 00 once in 100
    CHECK(std::abs(b0 / (double)n - 0.01) < 0.004);
    // the last training id still plants them, the first held-out one does not: the boundary is kHeldOutFirstId
    int planted = 0;
    for (int k = 0; k < 400; k++) planted += addition_problem(5, kHeldOutFirstId - 1, k).a == 0;
    CHECK(planted > 25);
}

TEST_CASE("addition accuracy counts a problem only when its whole answer is right") {
    // "12+5=71;3+4=7;9+9=8" (any widths: the helper reads only the targets): the last answer is cut off by
    // the row end, so it is not counted
    std::string s = "12+5=71;3+4=7;9+9=8";
    const int64_t T = (int64_t)s.size() - 1;
    std::vector<int32_t> tgt(T), pred(T);
    bool after_eq = false;
    for (int64_t t = 0; t < T; t++) {
        if (s[t] == '=') after_eq = true;
        if (s[t] == ';') after_eq = false;
        tgt[t] = after_eq ? s[t + 1] : -1;
        pred[t] = tgt[t] >= 0 ? tgt[t] : 'x';  // wrong where it does not matter
    }
    TaskAccuracy acc = addition_accuracy(pred.data(), tgt.data(), 1, T);
    CHECK(acc.total == 2);
    CHECK(acc.correct == 2);
    pred[4] = '2';  // first answer's first digit wrong ("21" instead of "71")
    acc = addition_accuracy(pred.data(), tgt.data(), 1, T);
    CHECK(acc.correct == 1);
    pred[4] = '7';
    pred[12] = ',';  // second problem's terminator wrong
    acc = addition_accuracy(pred.data(), tgt.data(), 1, T);
    CHECK(acc.correct == 1);
    CHECK(acc.fraction() == doctest::Approx(0.5));
    // two rows of a batch are separate: a run never continues into the next row
    std::vector<int32_t> tgt2 = tgt, pred2 = pred;
    tgt2.insert(tgt2.end(), tgt.begin(), tgt.end());
    pred2.insert(pred2.end(), pred.begin(), pred.end());
    acc = addition_accuracy(pred2.data(), tgt2.data(), 2, T);
    CHECK(acc.total == 4);
    CHECK(acc.correct == 2);
    // argmax of logits gives the predictions
    std::vector<float> logits = {0.1f, 2.0f, -1.0f, 3.0f, 0.0f, 1.0f};
    CHECK(argmax_rows(logits.data(), 2, 3) == std::vector<int32_t>{1, 0});
}

TEST_CASE("llm.c shard round trip, across files, and its errors") {
    TempDir tmp;
    std::vector<uint16_t> t1(50), t2(30);
    for (size_t i = 0; i < t1.size(); i++) t1[i] = (uint16_t)(1000 + i);
    for (size_t i = 0; i < t2.size(); i++) t2[i] = (uint16_t)(2000 + i);
    write_llmc_shard(tmp.path("shard_000.bin"), t1);
    write_llmc_shard(tmp.path("shard_001.bin"), t2);
    auto ds = make_dataset("llmc:" + tmp.path("shard_*.bin"), 3, 4096);
    CHECK(ds->vocab_size() == 4096);
    std::vector<uint16_t> all = t1;
    all.insert(all.end(), t2.begin(), t2.end());
    // each window is T+1 consecutive tokens of the concatenated shards: tokens then targets shifted by one
    const int64_t T = 16;
    bool crossed = false;
    for (int64_t id = 0; id < 40; id++) {
        std::vector<int32_t> tok(T), tgt(T);
        ds->get(id, T, tok.data(), tgt.data());
        auto it = std::find(all.begin(), all.end(), (uint16_t)tok[0]);
        REQUIRE(it != all.end());
        size_t start = it - all.begin();
        REQUIRE(start + T < all.size());
        for (int64_t t = 0; t < T; t++) {
            CHECK(tok[t] == all[start + t]);
            CHECK(tgt[t] == all[start + t + 1]);
        }
        crossed = crossed || (start < t1.size() && start + T >= t1.size());
    }
    CHECK(crossed);  // some window spans both files

    // tokens 1000..1049 and 2000..2029 against a vocabulary of 1010: refused when the shards are opened,
    // naming the first bad token (1010, index 10 of the first shard), before any sample is read
    std::string e = error_of([&] { make_dataset("llmc:" + tmp.path("shard_*.bin"), 3, 1010); });
    CHECK(contains(e, "shard_000.bin': token 1010 at index 10 (of 50)"));
    CHECK(contains(e, ">= the model's vocabulary size 1010"));
    // only the second shard is bad: still found at open
    e = error_of([&] { make_dataset("llmc:" + tmp.path("shard_*.bin"), 3, 2000); });
    CHECK(contains(e, "shard_001.bin': token 2000 at index 0 (of 30)"));
    CHECK(make_dataset("llmc:" + tmp.path("shard_*.bin"), 3, 2030)->vocab_size() == 2030);  // every id fits

    std::vector<int32_t> bad(256, 0);
    bad[0] = 12345;
    write_bytes(tmp.path("bad.bin"), bad.data(), bad.size() * 4);
    e = error_of([&] { make_dataset("llmc:" + tmp.path("bad.bin"), 0, 0); });
    CHECK(contains(e, "bad.bin"));
    CHECK(contains(e, "magic 12345"));
    bad[0] = kLlmcMagic;
    bad[1] = 3;
    write_bytes(tmp.path("v3.bin"), bad.data(), bad.size() * 4);
    CHECK(contains(error_of([&] { make_dataset("llmc:" + tmp.path("v3.bin"), 0, 0); }), "version 3"));

    write_llmc_shard(tmp.path("short.bin"), std::vector<uint16_t>(10, 1));
    auto short_ds = make_dataset("llmc:" + tmp.path("short.bin"), 0, 0);
    std::vector<int32_t> tok(T), tgt(T);
    e = error_of([&] { short_ds->get(0, T, tok.data(), tgt.data()); });
    CHECK(contains(e, "short.bin"));
    CHECK(contains(e, "10 tokens"));
    CHECK(contains(e, "T+1 = 17"));
    CHECK(contains(error_of([&] { make_dataset("llmc:" + tmp.path("missing_*.bin"), 0, 0); }), "missing_*.bin"));
}

TEST_CASE("llm.c shard version 2: uint32 tokens beyond uint16 (Llama 3's 128256), read back; its size checked") {
    TempDir tmp;
    // llm.c's Llama 3 shards (prepare_data.py for a vocabulary > 65536): the header, then uint32 tokens
    std::vector<int32_t> header(kLlmcHeaderInts, 0);
    header[0] = kLlmcMagic, header[1] = kLlmcVersion32, header[2] = 40;
    std::vector<uint32_t> tokens(40);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = 128255 - (uint32_t)i * 1000;  // 128255 .. 89255
    auto write = [&](const std::string& name, size_t n) {
        std::ofstream f(tmp.path(name), std::ios::binary);
        f.write((const char*)header.data(), (std::streamsize)(header.size() * 4));
        f.write((const char*)tokens.data(), (std::streamsize)(n * 4));
    };
    write("v2.bin", tokens.size());
    auto ds = make_dataset("llmc:" + tmp.path("v2.bin"), 0, 128256);
    const int64_t T = 8;
    std::vector<int32_t> tok(T), tgt(T);
    for (int64_t id = 0; id < 10; id++) {
        ds->get(id, T, tok.data(), tgt.data());
        const auto it = std::find(tokens.begin(), tokens.end(), (uint32_t)tok[0]);
        REQUIRE(it != tokens.end());
        const size_t start = (size_t)(it - tokens.begin());
        REQUIRE(start + T < tokens.size());
        for (int64_t t = 0; t < T; t++) {
            CHECK(tok[t] == (int32_t)tokens[start + t]);
            CHECK(tgt[t] == (int32_t)tokens[start + t + 1]);
        }
    }
    // the header's count is of 4-byte tokens: a file of 2-byte length for it is refused, and so is a token
    // the model's vocabulary has no row for
    write("v2_short.bin", tokens.size() / 2);
    CHECK(contains(error_of([&] { make_dataset("llmc:" + tmp.path("v2_short.bin"), 0, 128256); }),
                   "header says 40 tokens (1184 bytes), the file has 1104 bytes"));
    CHECK(contains(error_of([&] { make_dataset("llmc:" + tmp.path("v2.bin"), 0, 128000); }),
                   "v2.bin': token 128255 at index 0 (of 40)"));
}

TEST_CASE("raw uint16 and text datasets, and the --data factory's errors") {
    TempDir tmp;
    std::vector<uint16_t> raw(100);
    for (size_t i = 0; i < raw.size(); i++) raw[i] = (uint16_t)(i * 7);
    write_bytes(tmp.path("tokens.bin"), raw.data(), raw.size() * 2);
    auto ds = make_dataset("raw:" + tmp.path("tokens.bin"), 5, 0);
    const int64_t T = 8;
    std::vector<int32_t> tok(T), tgt(T);
    for (int64_t id = 0; id < 10; id++) {
        ds->get(id, T, tok.data(), tgt.data());
        REQUIRE(tok[0] % 7 == 0);
        int64_t start = tok[0] / 7;
        CHECK(start + T <= 99);  // the window start is in [0, N-T-1]
        for (int64_t t = 0; t < T; t++) {
            CHECK(tok[t] == (int32_t)((start + t) * 7));
            CHECK(tgt[t] == (int32_t)((start + t + 1) * 7));
        }
    }

    std::string text = "The quick brown fox jumps over the lazy dog.\n";
    write_bytes(tmp.path("a.txt"), text.data(), text.size());
    auto tds = make_dataset("text:" + tmp.path("a.txt"), 5, 0);
    CHECK(tds->vocab_size() == 256);
    tds->get(3, T, tok.data(), tgt.data());
    std::string window = render_bytes(tok.data(), T);
    size_t at = text.find(window);
    REQUIRE(at != std::string::npos);
    CHECK(tgt[T - 1] == (unsigned char)text[at + T]);
    CHECK(contains(tds->describe(), "a.txt"));

    std::string e = error_of([&] { make_dataset("csv:" + tmp.path("a.txt"), 0, 0); });
    CHECK(contains(e, "csv:"));
    CHECK(contains(e, "accepted: addition"));
    CHECK(contains(error_of([&] { make_dataset("addition", 0, 100); }), "vocabulary 100"));
    CHECK(contains(error_of([&] { make_dataset("text:" + tmp.path("nope.txt"), 0, 0); }), "nope.txt"));
    // a directory is named as one (mmap would only say "No such device")
    e = error_of([&] { make_dataset("text:" + tmp.path(""), 0, 0); });
    CHECK(contains(e, "is a directory, not a regular file"));
    e = error_of([&] { make_dataset("raw:" + tmp.path("tokens.bin") + "," + tmp.path(""), 0, 0); });
    CHECK(contains(e, "is a directory"));
}

}  // TEST_SUITE
