// pretokenize.hpp — the regexes byte-level BPE tokenizers cut text with before their merges, written out by
// hand (no regex engine), over Unicode's classes exactly as the tokenizers library's engine (Oniguruma) has
// them: \p{L} letters, \p{N} numbers, \s white space (common/unicode_tables.inc, which tools/unicode_tables.py
// measures on the library).
//
//   GPT-2 (ByteLevel's use_regex; SmolLM):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3 (a Split pre-tokenizer, "Isolated"; GPT-4's cl100k), digits = 3; Qwen2's is the same with digits = 1:
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//     \s*[\r\n]+|\s+(?!\S)|\s+
//
// Each returns the matches in order, which together are the text (every character matches some
// alternative). The alternatives are tried in order at each position, as the regex engine tries them, with
// the backtracking that changes a match: \s+(?!\S) gives the last space of a run to the word after it, and
// \s*[\r\n]+ ends a run of white space at its last line break.
//
// Playbook: "First steps" (the data: a tokenizer's pieces). Test: tests/01_single_gpu/test_tokenizer.cpp
// compares whole encodings with the tokenizers library (`build/bin/tests_01 -ts='ch01 np1' -tc='*tokenizer*'`).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace penta {

// the code point at s[i] and its length in bytes; a byte that starts no valid UTF-8 sequence counts as U+FFFD
// of length 1 (the library takes valid UTF-8 only)
std::pair<uint32_t, int> next_code_point(const std::string& s, size_t i);

bool is_unicode_letter(uint32_t c);  // \p{L}
bool is_unicode_number(uint32_t c);  // \p{N}
bool is_unicode_space(uint32_t c);   // \s

std::vector<std::string> gpt2_split(const std::string& text);
// Llama 3's pattern with \p{N}{1,max_digits} (3: Llama 3, GPT-4; 1: Qwen2)
std::vector<std::string> llama3_split(const std::string& text, int max_digits);

// the exact pattern strings these implement, as a tokenizer.json's Split pre-tokenizer spells them; 0 for
// any other pattern, else the max_digits of llama3_split
int llama3_pattern_digits(const std::string& pattern);

}  // namespace penta
