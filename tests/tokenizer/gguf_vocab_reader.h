// Test-only: reads the `tokenizer.ggml.*` keys of a GGUF file into a
// GgufSpmMetadata, so the tokenizer tests do not depend on the io module (the
// engine uses io/gguf.h for this). Handles GGUF v2/v3 metadata; skips every
// key it does not need, and stops before the tensor infos.
#ifndef DSV4_TESTS_TOKENIZER_GGUF_VOCAB_READER_H_
#define DSV4_TESTS_TOKENIZER_GGUF_VOCAB_READER_H_

#include <string>

#include "base/status.h"
#include "tokenizer/spm_tokenizer.h"

namespace dsv4::testing {

Result<GgufSpmMetadata> ReadGgufSpmMetadata(const std::string& path);

}  // namespace dsv4::testing

#endif  // DSV4_TESTS_TOKENIZER_GGUF_VOCAB_READER_H_
