// tokenizer.cpp — the byte tokenizer and tokenizer.json's byte-level BPE (tokenizer.hpp).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*tokenizer*'`.
#include "tokenizer.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core.hpp"
#include "pretokenize.hpp"

namespace penta {

namespace {

class ByteTokenizer : public Tokenizer {
   public:
    std::vector<int32_t> encode(const std::string& text) const override {
        std::vector<int32_t> ids;
        for (unsigned char c : text) ids.push_back(c);
        return ids;
    }
    std::string decode(const std::vector<int32_t>& ids) const override {
        std::string s;
        for (int32_t id : ids) s.push_back((char)(id & 0xff));
        return s;
    }
    int32_t vocab_size() const override { return 256; }
    std::string describe() const override { return "bytes (vocabulary 256)"; }
};

// ---- UTF-8 and GPT-2's byte alphabet ------------------------------------------------------------------

std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += (char)cp;
    } else if (cp < 0x800) {
        s += (char)(0xC0 | (cp >> 6)), s += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += (char)(0xE0 | (cp >> 12)), s += (char)(0x80 | ((cp >> 6) & 0x3F)), s += (char)(0x80 | (cp & 0x3F));
    } else {
        s += (char)(0xF0 | (cp >> 18)), s += (char)(0x80 | ((cp >> 12) & 0x3F));
        s += (char)(0x80 | ((cp >> 6) & 0x3F)), s += (char)(0x80 | (cp & 0x3F));
    }
    return s;
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 are shifted to 256 + n
std::vector<uint32_t> byte_alphabet() {
    std::vector<uint32_t> cp(256, 0);
    std::vector<bool> kept(256, false);
    for (int b = '!'; b <= '~'; b++) kept[b] = true;
    for (int b = 0xA1; b <= 0xAC; b++) kept[b] = true;
    for (int b = 0xAE; b <= 0xFF; b++) kept[b] = true;
    int n = 0;
    for (int b = 0; b < 256; b++) cp[b] = kept[b] ? (uint32_t)b : (uint32_t)(256 + n++);
    return cp;
}

// ---- byte-level BPE --------------------------------------------------------------------------------------

class ByteLevelBpe : public Tokenizer {
   public:
    explicit ByteLevelBpe(const std::string& path) : path_(path) {
        std::ifstream in(path);
        if (!in) FAIL("cannot open tokenizer '%s': %s", path.c_str(), std::strerror(errno));
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const std::exception& e) {
            FAIL("%s: not valid JSON: %s", path.c_str(), e.what());
        }
        const char* p = path.c_str();
        const nlohmann::json& m = j.value("model", nlohmann::json::object());
        if (m.value("type", std::string()) != "BPE" || !m.contains("vocab") || !m["vocab"].is_object())
            FAIL("%s: model type %s is not a BPE with a vocab (only byte-level BPE tokenizers are read)", p,
                 m.contains("type") ? m["type"].dump().c_str() : "(none)");
        if (m.value("byte_fallback", false))
            FAIL("%s: a BPE with byte_fallback (SentencePiece style) is not byte-level; not supported", p);
        ignore_merges_ = m.value("ignore_merges", false);
        for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) add_token(it.key(), it.value().get<int32_t>());
        const nlohmann::json& merges = m.value("merges", nlohmann::json::array());
        for (size_t r = 0; r < merges.size(); r++) {
            std::string a, b;
            if (merges[r].is_string()) {  // "a b"
                const std::string mr = merges[r].get<std::string>();
                const size_t sp = mr.find(' ');
                if (sp == std::string::npos) FAIL("%s: merge %zu \"%s\" is not \"A B\"", p, r, mr.c_str());
                a = mr.substr(0, sp), b = mr.substr(sp + 1);
            } else {  // ["a", "b"] (newer files)
                a = merges[r].at(0).get<std::string>(), b = merges[r].at(1).get<std::string>();
            }
            ranks_.emplace(a + ' ' + b, (int)r);
        }
        for (const auto& t : j.value("added_tokens", nlohmann::json::array())) {
            add_token(t.at("content").get<std::string>(), t.at("id").get<int32_t>());
            added_.push_back({t.at("content").get<std::string>(), t.at("id").get<int32_t>()});
        }
        std::sort(added_.begin(), added_.end(), [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
        read_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json());
        if (j.contains("post_processor") && !j["post_processor"].is_null()) read_post_processor(j["post_processor"]);
        if (j.contains("normalizer") && !j["normalizer"].is_null())  // it would change the text before the cut
            encode_refusal_ = "its normalizer " + j["normalizer"].value("type", std::string("?")) + " is not implemented";
        const std::vector<uint32_t> alphabet = byte_alphabet();
        for (int b = 0; b < 256; b++) {
            byte_char_[b] = utf8(alphabet[b]);
            char_byte_[alphabet[b]] = (uint8_t)b;
        }
    }

    int32_t vocab_size() const override { return (int32_t)tokens_.size(); }
    std::string describe() const override {
        return strfmt("%s (byte-level BPE, vocabulary %d, %zu merges)", path_.c_str(), vocab_size(), ranks_.size());
    }

    std::vector<int32_t> encode(const std::string& text) const override {
        CHECK(encode_refusal_.empty(), "%s: cannot encode text: %s", path_.c_str(), encode_refusal_.c_str());
        std::vector<int32_t> ids = prefix_;
        size_t i = 0, plain = 0;  // plain: where the text since the last added token starts
        while (i <= text.size()) {
            const std::pair<std::string, int32_t>* hit = nullptr;
            for (const auto& a : added_)
                if (!a.first.empty() && text.compare(i, a.first.size(), a.first) == 0) {
                    hit = &a;
                    break;
                }
            if (!hit && i < text.size()) {
                i++;
                continue;
            }
            encode_plain(text.substr(plain, i - plain), ids);
            if (!hit) break;
            ids.push_back(hit->second);
            i += hit->first.size();
            plain = i;
        }
        ids.insert(ids.end(), suffix_.begin(), suffix_.end());
        return ids;
    }

    std::string decode(const std::vector<int32_t>& ids) const override {
        std::string out;
        for (int32_t id : ids) {
            CHECK(id >= 0 && id < (int32_t)tokens_.size(), "%s: token id %d is outside the vocabulary of %zu",
                  path_.c_str(), id, tokens_.size());
            const std::string& t = tokens_[id];
            if (std::any_of(added_.begin(), added_.end(), [&](const auto& a) { return a.second == id; })) {
                out += t;  // added tokens are literal text
                continue;
            }
            for (size_t i = 0; i < t.size();) {
                auto [c, len] = next_code_point(t, i);
                auto it = char_byte_.find(c);
                if (it != char_byte_.end()) out += (char)it->second;
                else out += t.substr(i, len);
                i += len;
            }
        }
        return out;
    }

   private:
    struct PreStep {
        enum Kind { byte_level, digits, split } kind;
        bool add_prefix_space = false, use_regex = true, individual_digits = false;
        int split_digits = 0;  // split: Llama 3's regex with \p{N}{1,split_digits} (pretokenize.hpp)
    };

    void add_token(const std::string& s, int32_t id) {
        CHECK(id >= 0 && id < (1 << 24), "%s: token id %d of '%s' is out of range", path_.c_str(), id, s.c_str());
        if ((int32_t)tokens_.size() <= id) tokens_.resize(id + 1);
        tokens_[id] = s;
        vocab_[s] = id;
    }

    void read_pre_tokenizer(const nlohmann::json& pt) {
        if (pt.is_null()) {
            encode_refusal_ = "it has no pre-tokenizer (a byte-level BPE needs ByteLevel)";
            return;
        }
        const std::string type = pt.value("type", std::string());
        if (type == "Sequence") {
            for (const auto& s : pt.value("pretokenizers", nlohmann::json::array())) read_pre_tokenizer(s);
        } else if (type == "ByteLevel") {
            PreStep s{PreStep::byte_level};
            s.add_prefix_space = pt.value("add_prefix_space", false);
            s.use_regex = pt.value("use_regex", true);
            steps_.push_back(s);
        } else if (type == "Digits") {
            PreStep s{PreStep::digits};
            s.individual_digits = pt.value("individual_digits", false);
            steps_.push_back(s);
        } else if (type == "Split") {  // a regex: Llama 3's (and Qwen2's) is written out in pretokenize.cpp
            const nlohmann::json& pat = pt.contains("pattern") ? pt["pattern"] : nlohmann::json();
            const bool regex = pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string();
            PreStep s{PreStep::split};
            s.split_digits = regex ? llama3_pattern_digits(pat["Regex"].get<std::string>()) : 0;
            const bool isolated = pt.contains("behavior") && pt["behavior"] == "Isolated" && pt.value("invert", false) == false;
            if (s.split_digits > 0 && isolated) steps_.push_back(s);
            else if (encode_refusal_.empty())
                encode_refusal_ = "its Split pre-tokenizer " + pt.dump() + " is not implemented (only Llama 3's and "
                                  "Qwen2's regex, behavior Isolated); decoding works";
        } else if (encode_refusal_.empty()) {
            encode_refusal_ = "its pre-tokenizer " + type + " is not implemented (ByteLevel, Digits, Llama 3's Split "
                              "and a Sequence of them are); decoding works";
        }
    }

    // What encode adds around the text, as the library's encode(text) does (add_special_tokens): a
    // TemplateProcessing's single-sequence template (Llama 3's <|begin_of_text|> first). ByteLevel's only
    // trims offsets: nothing to do.
    void read_post_processor(const nlohmann::json& pp) {
        const std::string type = pp.value("type", std::string());
        if (type == "Sequence") {
            for (const auto& p : pp.value("processors", nlohmann::json::array())) read_post_processor(p);
        } else if (type == "TemplateProcessing") {
            bool after = false;  // past the sequence: what follows is appended
            for (const auto& piece : pp.value("single", nlohmann::json::array())) {
                if (piece.contains("Sequence")) {
                    after = true;
                    continue;
                }
                const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
                for (int32_t id : pp.at("special_tokens").at(name).at("ids"))
                    (after ? suffix_ : prefix_).push_back(id);
            }
        } else if (type != "ByteLevel" && encode_refusal_.empty()) {
            encode_refusal_ = "its post-processor " + type + " is not implemented (TemplateProcessing and ByteLevel "
                              "are); decoding works";
        }
    }

    // one stretch of text without added tokens: pre-tokenize, then BPE each piece
    void encode_plain(const std::string& text, std::vector<int32_t>& ids) const {
        if (text.empty()) return;
        CHECK(std::any_of(steps_.begin(), steps_.end(), [](const PreStep& s) { return s.kind == PreStep::byte_level; }),
              "%s: cannot encode text: the pre-tokenizer has no ByteLevel step", path_.c_str());
        std::vector<std::string> pieces = {text};
        for (const PreStep& s : steps_) {
            std::vector<std::string> next;
            for (std::string& piece : pieces) {
                if (s.kind == PreStep::digits) {
                    split_digits(piece, s.individual_digits, next);
                    continue;
                }
                if (s.kind == PreStep::split) {
                    for (std::string& part : llama3_split(piece, s.split_digits)) next.push_back(std::move(part));
                    continue;
                }
                if (s.add_prefix_space && piece.compare(0, 1, " ") != 0) piece = " " + piece;
                if (!s.use_regex) {
                    next.push_back(piece);
                    continue;
                }
                for (std::string& part : gpt2_split(piece)) next.push_back(std::move(part));
            }
            pieces = std::move(next);
        }
        for (const std::string& piece : pieces) bpe(piece, ids);
    }

    static void split_digits(const std::string& s, bool individual, std::vector<std::string>& out) {
        size_t i = 0;
        while (i < s.size()) {
            size_t j = i;
            const bool digit = s[i] >= '0' && s[i] <= '9';
            if (digit) {
                j = i + 1;
                while (!individual && j < s.size() && s[j] >= '0' && s[j] <= '9') j++;
            } else {
                while (j < s.size() && !(s[j] >= '0' && s[j] <= '9')) j++;
            }
            out.push_back(s.substr(i, j - i));
            i = j;
        }
    }

    void bpe(const std::string& piece, std::vector<int32_t>& ids) const {
        if (piece.empty()) return;
        std::vector<std::string> sym;
        std::string whole;
        for (unsigned char c : piece) {
            sym.push_back(byte_char_[c]);
            whole += byte_char_[c];
        }
        if (ignore_merges_) {
            auto it = vocab_.find(whole);
            if (it != vocab_.end()) {
                ids.push_back(it->second);
                return;
            }
        }
        while (sym.size() > 1) {  // GPT-2's loop: merge every occurrence of the lowest-ranked pair
            int best = INT_MAX;
            size_t at = 0;
            for (size_t i = 0; i + 1 < sym.size(); i++) {
                auto it = ranks_.find(sym[i] + ' ' + sym[i + 1]);
                if (it != ranks_.end() && it->second < best) best = it->second, at = i;
            }
            if (best == INT_MAX) break;
            const std::string a = sym[at], b = sym[at + 1];
            std::vector<std::string> merged;
            for (size_t i = 0; i < sym.size(); i++) {
                if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
                    merged.push_back(a + b);
                    i++;
                } else {
                    merged.push_back(sym[i]);
                }
            }
            sym = std::move(merged);
        }
        for (const std::string& s : sym) {
            auto it = vocab_.find(s);
            CHECK(it != vocab_.end(), "%s: symbol '%s' of piece '%s' is not in the vocabulary", path_.c_str(), s.c_str(),
                  piece.c_str());
            ids.push_back(it->second);
        }
    }

    std::string path_;
    std::vector<std::string> tokens_;  // by id
    std::unordered_map<std::string, int32_t> vocab_;
    std::unordered_map<std::string, int> ranks_;  // "a b" -> merge rank
    std::vector<std::pair<std::string, int32_t>> added_;  // longest first
    std::vector<PreStep> steps_;
    std::vector<int32_t> prefix_, suffix_;  // the post-processor's special tokens around every encoding
    std::string encode_refusal_;  // why encode cannot work ("": it can)
    bool ignore_merges_ = false;
    std::string byte_char_[256];
    std::map<uint32_t, uint8_t> char_byte_;
};

}  // namespace

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) { return std::make_unique<ByteLevelBpe>(path); }

}  // namespace penta
