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

// the code point at s[i] and its length in bytes; a byte that starts no valid sequence is itself (length 1)
std::pair<uint32_t, int> next_cp(const std::string& s, size_t i) {
    const unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return {0xFFFD, 1};
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; k++) {
        const unsigned char d = s[i + k];
        if ((d >> 6) != 2) return {0xFFFD, 1};
        cp = (cp << 6) | (d & 0x3F);
    }
    return {cp, len};
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

// ---- the regex's classes (\s, \p{L}, \p{N}); see the header for how far they are exact -------------------

bool is_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
bool is_number(uint32_t c) {
    return (c >= '0' && c <= '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE) ||
           (c >= 0x660 && c <= 0x669) || (c >= 0x2070 && c <= 0x2079) || (c >= 0x2080 && c <= 0x2089) ||
           (c >= 0x2150 && c <= 0x2189) || (c >= 0x2460 && c <= 0x249B) || (c >= 0xFF10 && c <= 0xFF19);
}
bool is_letter(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (c < 0xC0) return c == 0xAA || c == 0xB5 || c == 0xBA;  // Latin-1's symbols are not letters, but these
    if (c == 0xD7 || c == 0xF7) return false;                  // × ÷
    if (is_space(c) || is_number(c)) return false;
    // general punctuation, currency, arrows, math, box drawing, CJK punctuation, fullwidth ASCII punctuation
    if ((c >= 0x2000 && c <= 0x2BFF) || (c >= 0x3000 && c <= 0x303F) || (c >= 0xFF00 && c <= 0xFF0F) ||
        (c >= 0xFF1A && c <= 0xFF20) || c == 0xFFFD)
        return false;
    return true;
}

// GPT-2's pattern over the code points of a piece: its matches, in order (together, the piece)
std::vector<std::string> gpt2_split(const std::string& s) {
    std::vector<uint32_t> cp;
    std::vector<size_t> at;  // byte offset of each code point, and the end
    for (size_t i = 0; i < s.size();) {
        auto [c, len] = next_cp(s, i);
        cp.push_back(c);
        at.push_back(i);
        i += len;
    }
    at.push_back(s.size());
    const size_t n = cp.size();
    auto other = [&](uint32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); };
    auto run = [&](size_t j, bool (*cls)(uint32_t)) {
        while (j < n && cls(cp[j])) j++;
        return j;
    };
    std::vector<std::string> out;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        if (cp[i] == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
            const uint32_t a = cp[i + 1], b = i + 2 < n ? cp[i + 2] : 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd') j = i + 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) j = i + 3;
        }
        if (j == i) {
            const size_t k = cp[i] == ' ' && i + 1 < n ? i + 1 : i;  // the optional leading space
            if (is_letter(cp[k])) j = run(k, is_letter);
            else if (is_number(cp[k])) j = run(k, is_number);
            else if (other(cp[k])) {
                j = k;
                while (j < n && other(cp[j])) j++;
            }
        }
        if (j == i) {  // whitespace: \s+(?!\S) leaves the last space to the word after it, else \s+
            const size_t k = run(i, is_space);
            j = k == n || k - i < 2 ? k : k - 1;
        }
        out.push_back(s.substr(at[i], at[j] - at[i]));
        i = j;
    }
    return out;
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
        std::vector<int32_t> ids;
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
                auto [c, len] = next_cp(t, i);
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
        enum Kind { byte_level, digits } kind;
        bool add_prefix_space = false, use_regex = true, individual_digits = false;
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
        } else if (encode_refusal_.empty()) {
            encode_refusal_ = "its pre-tokenizer " + type +
                              " is not implemented (ByteLevel, Digits and a Sequence of them are); decoding works";
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
    std::string encode_refusal_;  // why encode cannot work ("": it can)
    bool ignore_merges_ = false;
    std::string byte_char_[256];
    std::map<uint32_t, uint8_t> char_byte_;
};

}  // namespace

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) { return std::make_unique<ByteLevelBpe>(path); }

}  // namespace penta
