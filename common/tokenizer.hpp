// tokenizer.hpp — text <-> token ids for generation (--generate): the byte tokenizer of the built-in data
// (one token per byte, vocabulary 256) and the byte-level BPE of a Hugging Face tokenizer.json (GPT-2,
// SmolLM, the tokenizers library's ByteLevelBPETokenizer).
//
// Byte-level BPE: every byte of the text is first written as one printable character (GPT-2's
// bytes_to_unicode: 'Ġ' for a space), the text is cut into pieces by the pre-tokenizer, and inside each
// piece the merges are applied, lowest rank first, until none applies; each final symbol is a vocabulary
// entry. Decoding maps the characters back to bytes. Added tokens (<|endoftext|>, ...) are matched literally
// before anything else.
//
// Encoding implements the pre-tokenizers tokenizer.json files of this kind use: ByteLevel (with GPT-2's
// regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), Digits and a Sequence of
// them. The regex's Unicode classes are exact for ASCII and Latin-1; beyond, a character is a space, a
// number or punctuation from the common tables below, and a letter otherwise (text in other scripts may cut
// differently from the tokenizers library). Other pre-tokenizers (Llama 3's Split regex, SentencePiece's
// Metaspace) and normalizers are refused for encoding, naming them; decoding works for any byte-level vocabulary.
//
// Test: tests/01_single_gpu/test_tokenizer.cpp compares encode with the tokenizers library on text
// (`build/bin/tests_01 -ts='ch01 np1' -tc='*tokenizer*'`).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace penta {

class Tokenizer {
   public:
    virtual ~Tokenizer() = default;
    virtual std::vector<int32_t> encode(const std::string& text) const = 0;
    virtual std::string decode(const std::vector<int32_t>& ids) const = 0;  // bytes (UTF-8 for real text)
    virtual int32_t vocab_size() const = 0;
    virtual std::string describe() const = 0;
};

std::unique_ptr<Tokenizer> byte_tokenizer();
// a tokenizer.json of a byte-level BPE model; throws naming the file and what is not supported
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path);

}  // namespace penta
