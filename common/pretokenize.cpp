// pretokenize.cpp — GPT-2's and Llama 3's pre-tokenizer regexes by hand, over the tokenizers library's Unicode
// classes (pretokenize.hpp).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*tokenizer*'`.
#include "pretokenize.hpp"

#include <cstddef>

namespace penta {

namespace {

struct CodeRange {
    uint32_t lo, hi;
};
#include "unicode_tables.inc"

template <size_t N>
bool in_table(const CodeRange (&t)[N], uint32_t c) {
    size_t lo = 0, hi = N;  // the first range that starts after c; c is in the one before it, or in none
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (t[mid].lo <= c) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && c <= t[lo - 1].hi;
}

bool is_other(uint32_t c) { return !is_unicode_space(c) && !is_unicode_letter(c) && !is_unicode_number(c); }
bool is_newline(uint32_t c) { return c == '\r' || c == '\n'; }

// the text as code points, and where each starts in its bytes (one more: the end)
struct CodePoints {
    std::vector<uint32_t> cp;
    std::vector<size_t> at;
    explicit CodePoints(const std::string& s) {
        for (size_t i = 0; i < s.size();) {
            const auto [c, len] = next_code_point(s, i);
            cp.push_back(c), at.push_back(i);
            i += (size_t)len;
        }
        at.push_back(s.size());
    }
    size_t size() const { return cp.size(); }
    // the end of the run of `cls` that starts at j, at most `most` long
    size_t run(size_t j, bool (*cls)(uint32_t), size_t most = SIZE_MAX) const {
        const size_t from = j;
        while (j < cp.size() && j - from < most && cls(cp[j])) j++;
        return j;
    }
    // 's 't 're 've 'm 'll 'd at i: where it ends, or i. Ignoring case as Oniguruma folds it: ASCII, and the
    // long s (U+017F) is an s.
    size_t contraction(size_t i, bool ignore_case) const {
        if (cp[i] != '\'' || i + 1 >= cp.size()) return i;
        auto low = [&](size_t k) -> uint32_t {
            if (k >= cp.size()) return 0;
            const uint32_t c = cp[k];
            if (!ignore_case) return c;
            return c == 0x17F ? 's' : c >= 'A' && c <= 'Z' ? c + 32 : c;
        };
        const uint32_t a = low(i + 1), b = low(i + 2);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        return i;
    }
    // \s+(?!\S) then \s+ at i, a space: the run, less its last space when the run is longer than one and a
    // non-space follows (that space goes with the word)
    size_t spaces(size_t i) const {
        const size_t k = run(i, is_unicode_space);
        return k == cp.size() || k - i < 2 ? k : k - 1;
    }
};

}  // namespace

std::pair<uint32_t, int> next_code_point(const std::string& s, size_t i) {
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

bool is_unicode_letter(uint32_t c) { return in_table(kLetters, c); }
bool is_unicode_number(uint32_t c) { return in_table(kNumbers, c); }
bool is_unicode_space(uint32_t c) { return in_table(kSpaces, c); }

std::vector<std::string> gpt2_split(const std::string& s) {
    const CodePoints t(s);
    const size_t n = t.size();
    std::vector<std::string> out;
    for (size_t i = 0; i < n;) {
        size_t j = t.contraction(i, false);
        if (j == i) {  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
            const size_t k = t.cp[i] == ' ' && i + 1 < n ? i + 1 : i;  // the optional leading space
            if (is_unicode_letter(t.cp[k])) j = t.run(k, is_unicode_letter);
            else if (is_unicode_number(t.cp[k])) j = t.run(k, is_unicode_number);
            else if (is_other(t.cp[k])) j = t.run(k, is_other);
        }
        if (j == i) j = t.spaces(i);
        out.push_back(s.substr(t.at[i], t.at[j] - t.at[i]));
        i = j;
    }
    return out;
}

std::vector<std::string> llama3_split(const std::string& s, int max_digits) {
    const CodePoints t(s);
    const size_t n = t.size();
    std::vector<std::string> out;
    for (size_t i = 0; i < n;) {
        const uint32_t c = t.cp[i];
        size_t j = t.contraction(i, true);
        // [^\r\n\p{L}\p{N}]?\p{L}+ : letters, maybe after one character that is none of those
        if (j == i && is_unicode_letter(c)) j = t.run(i, is_unicode_letter);
        else if (j == i && !is_newline(c) && !is_unicode_number(c) && i + 1 < n && is_unicode_letter(t.cp[i + 1]))
            j = t.run(i + 1, is_unicode_letter);
        if (j == i && is_unicode_number(c)) j = t.run(i, is_unicode_number, (size_t)max_digits);  // \p{N}{1,digits}
        if (j == i) {  //  ?[^\s\p{L}\p{N}]+[\r\n]*
            const size_t k = is_other(c) ? i : c == ' ' && i + 1 < n && is_other(t.cp[i + 1]) ? i + 1 : i;
            if (is_other(t.cp[k])) j = t.run(t.run(k, is_other), is_newline);
        }
        if (j == i) {  // white space: \s*[\r\n]+ up to the run's last line break, else \s+(?!\S), \s+
            const size_t k = t.run(i, is_unicode_space);
            for (size_t p = k; p > i; p--)
                if (is_newline(t.cp[p - 1])) {
                    j = p;
                    break;
                }
            if (j == i) j = t.spaces(i);
        }
        out.push_back(s.substr(t.at[i], t.at[j] - t.at[i]));
        i = j;
    }
    return out;
}

int llama3_pattern_digits(const std::string& pattern) {
    const std::string head = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}";
    const std::string tail = "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    if (pattern == head + "{1,3}" + tail) return 3;  // Llama 3, GPT-4's cl100k
    if (pattern == head + tail) return 1;            // Qwen2
    return 0;
}

}  // namespace penta
