// test_tokenizer.cpp — our byte-level BPE (common/tokenizer.cpp) against the Hugging Face tokenizers library:
// tokenizers trained by the library on texts Debian ships (the licenses in /usr/share/common-licenses), with
// GPT-2's ByteLevel pre-tokenizer, with SmolLM's Digits + ByteLevel, with add_prefix_space, with Llama 3's Split
// regex (and Qwen2's) + its <|begin_of_text|> template; on those texts and on a sample with Latin-1, Greek,
// Cyrillic, CJK, emoji, a combining accent, Arabic-Indic and superscript digits, long numbers, punctuation,
// contractions in both cases, CRLF, tabs, runs of spaces and an added token, our ids must be the library's
// and decoding them must give the text back. Generation with a KV cache must give the
// same tokens as running the whole sequence again at every step.
//   build/bin/tests_01 -ts='ch01 np1' -tc='*tokenizer*,*generat*'
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../../common/generate.hpp"
#include "../../common/pretokenize.hpp"
#include "../../common/tokenizer.hpp"
#include "hf_testing.hpp"

using namespace penta;
using namespace penta::hf_testing;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

const char* kSample =
    "Naïve café — “quotes” and ‘single’ 1234 ½ x² 3.14e-5\n  tabs\tand   spaces   \n"
    "don't we'll I'm they've you'd SHE'S it's 'tis\n<|endoftext|>A second document, with  double spaces\n\n\n"
    // beyond Latin-1: other scripts, a combining accent, emoji, other digits, CRLF, the long s, case in contractions
    "Ελληνικά, русский язык; 中文字符。 😀👍🏽 e\u0301 ٣٤٥ ¹²³ 1234567 (x+y)*2!! WE'LL x'ſd 'RE\r\n\t\ttab \r\n  \n end  ";

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("tokenizer: our byte-level BPE encodes like the tokenizers library and decodes back") {
    std::string why;
    const std::string py = python_with_hf(&why);
    if (py.empty()) SKIP_TEST(why);
    const std::string dir = "/tmp/penta_tok_" + std::to_string(getpid());
    std::system(("mkdir -p " + dir).c_str());
    const std::string texts = "/usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0";
    const std::string sample = dir + "/sample.txt";
    std::ofstream(sample) << kSample;
    for (const char* variant : {"", "--digits", "--prefix-space", "--split 3", "--split 1"}) {
        CAPTURE(std::string(variant));
        const std::string tok = dir + "/tokenizer.json", ids = dir + "/ids.txt";
        REQUIRE(std::system((py + " " PENTA_SOURCE_DIR "/tools/hf_reference.py tokenizer " + tok + " " + texts + " " +
                             variant).c_str()) == 0);
        std::unique_ptr<Tokenizer> t = load_tokenizer_json(tok);
        CHECK(t->vocab_size() == 512);
        for (const std::string& text_file : {sample, std::string("/usr/share/common-licenses/GPL-3")}) {
            CAPTURE(text_file);
            REQUIRE(std::system((py + " " PENTA_SOURCE_DIR "/tools/hf_reference.py encode " + tok + " " + text_file +
                                 " " + ids).c_str()) == 0);
            std::vector<int32_t> want;
            std::istringstream in(read_file(ids));
            for (int32_t id; in >> id;) want.push_back(id);
            const std::string text = read_file(text_file);
            const std::vector<int32_t> got = t->encode(text);
            REQUIRE(!want.empty());
            size_t first = 0;
            while (first < std::min(got.size(), want.size()) && got[first] == want[first]) first++;
            CHECK_MESSAGE(got == want, "ids differ from the tokenizers library's at index " << first << " of " << want.size()
                                                                                             << " (ours " << got.size() << ")");
            // decoding gives the text back (add_prefix_space added a space to each stretch between added tokens;
            // Llama 3's template put <|begin_of_text|> first)
            const bool bos = std::string(variant).rfind("--split", 0) == 0;
            if (std::string(variant) != "--prefix-space")
                CHECK(t->decode(std::vector<int32_t>(got.begin() + (bos ? 1 : 0), got.end())) == text);
        }
    }
    std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("tokenizer: the pre-tokenizer regexes cut text where the tokenizers library's regex engine cuts it") {
    std::string why;
    const std::string py = python_with_hf(&why);
    if (py.empty()) SKIP_TEST(why);
    // the sample, then 6000 units drawn from letters of several scripts (a titlecase one, one beyond the BMP),
    // combining marks, numbers of several kinds (and beyond the BMP), punctuation and symbols, every kind of
    // white space and line break, and the contractions in both cases: every alternative of the patterns, and
    // the boundaries between them
    const std::vector<std::string> units = {
        "a", "b", "Z", "é", "ſ", "Ω", "ж", "中", "ا", "ǅ", "𝐀", "𝟘", "\u0301", "\u0903", "0", "7", "٣", "¹", "½", "Ⅻ", "'",
        "!", ".", ",", "(", "—", "“", "😀", "🏽", "$", "_", "\u00AD", " ", " ", " ", "\t", "\n", "\r", "\r\n",
        "\u00A0", "\u2028", "\u3000", "\v", "'s", "'S", "'ll", "'LL", "'re", "'Ve", "'d", "'M", "'t", "don't"};
    std::string text = kSample;
    uint64_t x = 12345;
    for (int i = 0; i < 6000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        text += units[(x >> 33) % units.size()];
    }
    const std::string dir = "/tmp/penta_split_" + std::to_string(getpid());
    std::system(("mkdir -p " + dir).c_str());
    std::ofstream(dir + "/text.txt", std::ios::binary) << text;
    for (const char* kind : {"gpt2", "llama3", "qwen2"}) {
        CAPTURE(std::string(kind));
        REQUIRE(std::system((py + " " PENTA_SOURCE_DIR "/tools/hf_reference.py split " + kind + " " + dir +
                             "/text.txt " + dir + "/pieces.json").c_str()) == 0);
        const std::vector<std::string> want = nlohmann::json::parse(read_file(dir + "/pieces.json"));
        const std::string k = kind;
        const std::vector<std::string> got = k == "gpt2" ? gpt2_split(text) : llama3_split(text, k == "llama3" ? 3 : 1);
        size_t first = 0;
        while (first < std::min(got.size(), want.size()) && got[first] == want[first]) first++;
        CHECK_MESSAGE(got == want, "piece " << first << " of " << want.size() << " differs: ours '"
                                            << (first < got.size() ? got[first] : "") << "', the library's '"
                                            << (first < want.size() ? want[first] : "") << "'");
    }
    std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("tokenizer: the byte tokenizer, and what a tokenizer.json we cannot encode with says") {
    std::unique_ptr<Tokenizer> b = byte_tokenizer();
    CHECK(b->encode("24+71=") == std::vector<int32_t>{'2', '4', '+', '7', '1', '='});
    CHECK(b->decode({'9', '5', '0', ';'}) == "950;");
    const std::string path = "/tmp/penta_tok_" + std::to_string(getpid()) + ".json";
    std::ofstream(path) << R"({"model": {"type": "WordPiece", "vocab": {}}})";
    CHECK(contains(error_of([&] { load_tokenizer_json(path); }), "is not a BPE"));
    std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
                              "pre_tokenizer": {"type": "Metaspace"}, "decoder": {"type": "ByteLevel"}})";
    std::unique_ptr<Tokenizer> t = load_tokenizer_json(path);
    CHECK(t->decode({2, 0}) == "aba");  // decoding needs no pre-tokenizer
    CHECK(contains(error_of([&] { t->encode("ab"); }), "pre-tokenizer Metaspace is not implemented"));
    std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "NFC"},
                              "pre_tokenizer": {"type": "ByteLevel"}})";
    CHECK(contains(error_of([&] { load_tokenizer_json(path)->encode("a"); }), "normalizer NFC is not implemented"));
    std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Sequence",
        "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false},
                          {"type": "ByteLevel", "use_regex": false}]}})";
    const std::string split = error_of([&] { load_tokenizer_json(path)->encode("a"); });
    CHECK(contains(split, "its Split pre-tokenizer {"));  // the whole step, its pattern in it
    CHECK(contains(split, "is not implemented (only Llama 3's and Qwen2's regex, behavior Isolated)"));
    std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"},
                              "post_processor": {"type": "RobertaProcessing"}})";
    CHECK(contains(error_of([&] { load_tokenizer_json(path)->encode("a"); }),
                   "its post-processor RobertaProcessing is not implemented"));
    std::remove(path.c_str());
}

TEST_CASE("generate: the KV cache gives the tokens a full forward over the whole sequence gives, greedy and sampled") {
    LlamaConfig c = preset("tiny");
    c.rope_scaling = RopeScaling{RopeScaling::Type::llama3, 8, 1, 4, 16};  // positions beyond 16 are rescaled
    Model m(c, Device::cpu, 3);
    const std::vector<int32_t> prompt = {5, 9, 2, 33, 7};
    for (float temperature : {0.0f, 0.8f}) {
        CAPTURE(temperature);
        GenerateOptions o;
        o.max_new = 20, o.temperature = temperature, o.top_k = temperature > 0 ? 10 : 0, o.seed = 4;
        const std::vector<int32_t> got = generate(m, prompt, o);
        REQUIRE(got.size() == 20);
        // the same rule on logits from the whole sequence, recomputed from scratch at every step
        std::vector<int32_t> seq = prompt;
        for (int64_t step = 0; step < 20; step++) {
            const int64_t T = (int64_t)seq.size();
            const std::vector<float> all =
                m.forward_logits(Tensor::from_host_i32(seq, {T}, Device::cpu), 1, T).to_host();
            const std::vector<float> last(all.end() - c.vocab, all.end());
            seq.push_back(sample_token(last, o, step));
            CHECK_MESSAGE(seq.back() == got[step], "step " << step << ": full forward " << seq.back() << ", KV cache " << got[step]);
        }
    }
    GenerateOptions o;
    o.max_new = 100;  // more than max_seq 32 leaves room for: the last token fed sits at position 31
    CHECK(generate(m, prompt, o).size() == (size_t)(c.max_seq - (int64_t)prompt.size() + 1));
    o.stop = {generate(m, prompt, GenerateOptions{}).at(0)};
    CHECK(generate(m, prompt, o).empty());  // the first token is a stop token
    CHECK(contains(error_of([&] { generate(m, {70}, GenerateOptions{}); }), "prompt token 70 is outside the vocabulary"));
}

}  // TEST_SUITE
