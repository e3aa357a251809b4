// tokenizer.hpp — text <-> token ids for generation (--generate): the byte tokenizer of the built-in data
// (one token per byte, vocabulary 256) and the byte-level BPE of a Hugging Face tokenizer.json (GPT-2,
// SmolLM, Llama 3, Qwen2, the tokenizers library's ByteLevelBPETokenizer).
//
// Byte-level BPE: every byte of the text is first written as one printable character (GPT-2's
// bytes_to_unicode: 'Ġ' for a space), the text is cut into pieces by the pre-tokenizer, and inside each
// piece the merges are applied, lowest rank first, until none applies; each final symbol is a vocabulary
// entry. Decoding maps the characters back to bytes. Added tokens (<|endoftext|>, ...) are matched literally
// before anything else.
//
// Encoding implements the pre-tokenizers tokenizer.json files of this kind use: ByteLevel (with GPT-2's
// regex), Digits, Llama 3's and Qwen2's Split regex, and a Sequence of them (pretokenize.hpp: the regexes, over
// Unicode's classes as the tokenizers library has them), and a TemplateProcessing post-processor's special
// tokens around the text (Llama 3's <|begin_of_text|>), as the library's encode(text) adds them. Other
// pre-tokenizers (another Split pattern, SentencePiece's Metaspace), post-processors and normalizers are
// refused for encoding, naming them; decoding works for any byte-level vocabulary.
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
