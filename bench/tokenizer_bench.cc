#include <algorithm>
#include <vector>
// Encode throughput of BpeTokenizer (single thread), for bench/tokenizer_bench.py.
// Usage: tokenizer_bench TOKENIZER_JSON[.gz] TEXT_FILE [REPEATS]
// Prints one line: "<bytes> <tokens> <median seconds>".
#include <chrono>
#include <cstdio>
#include <string>

#include "base/mapped_file.h"
#include "tokenizer/bpe_tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON TEXT_FILE [REPEATS]\n", argv[0]);
    return 2;
  }
  auto tok = dsv4::LoadTokenizerJson(argv[1]);
  auto text = dsv4::ReadFileToString(argv[2]);
  if (!tok.ok() || !text.ok()) {
    std::fprintf(stderr, "%s\n", (!tok.ok() ? tok.status() : text.status()).ToString().c_str());
    return 1;
  }
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<double> times;
  size_t n_tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    n_tokens = (*tok)->Encode(*text, false).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    times.push_back(s);
  }
  std::sort(times.begin(), times.end());
  std::printf("%zu %zu %.6f\n", text->size(), n_tokens, times[times.size() / 2]);
  return 0;
}
