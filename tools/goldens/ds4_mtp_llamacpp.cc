// llama.cpp's NextN MTP draft logits of a prompt, for tools/goldens/ds4_gguf_mtp.py.
//
// Runs the target model on the prompt with its NextN hidden states kept
// (llama.cpp's staging API, src/llama-ext.h, as common/speculative.cpp's MTP
// driver uses it), then the MTP draft model on the pairs (h_{k-1}, x_k) at
// positions k = 1..T-1 — the pairing of that driver, without its leading
// entry for token 0 (which pairs x_0 with a zero state; DeepSeek's reference
// has no such entry). Writes the draft logits [T-1, n_vocab] as raw f32.
//
// Built against a llama.cpp checkout (not part of this repository):
//   g++ -std=c++17 -O2 tools/goldens/ds4_mtp_llamacpp.cc -I$L/include -I$L/ggml/include \
//       -I$L/src -L$L/build/bin -lllama -lggml -lggml-base -o /tmp/ds4_mtp_llamacpp
// Usage: ds4_mtp_llamacpp MAIN.gguf MTP.gguf IDS.txt OUT.f32
#include <cstdio>
#include <fstream>
#include <vector>

#include "llama-ext.h"
#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MAIN.gguf MTP.gguf IDS.txt OUT.f32\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> ids;
  std::ifstream in(argv[3]);
  for (llama_token t; in >> t;) ids.push_back(t);
  const int T = static_cast<int>(ids.size());

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* target = llama_model_load_from_file(argv[1], mp);
  mp.load_mtp = true;
  llama_model* draft = llama_model_load_from_file(argv[2], mp);
  if (target == nullptr || draft == nullptr) return 1;

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 256;
  cp.n_threads = cp.n_threads_batch = 2;
  llama_context* ctx_t = llama_init_from_model(target, cp);
  llama_set_embeddings_nextn(ctx_t, true, /*masked=*/false);
  if (llama_decode(ctx_t, llama_batch_get_one(ids.data(), T)) != 0) return 1;
  const int W = llama_model_n_embd_out(target);
  const std::vector<float> h(llama_get_embeddings_nextn(ctx_t),
                             llama_get_embeddings_nextn(ctx_t) + static_cast<size_t>(T) * W);

  cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
  llama_context* ctx_d = llama_init_from_model(draft, cp);
  llama_set_embeddings_nextn(ctx_d, true, /*masked=*/true);
  llama_batch_ext* b = llama_batch_ext_init(ctx_d);
  for (int k = 1; k < T; ++k) {
    const int idx = llama_batch_ext_add_token(b, 0, ids[k]);
    const llama_pos pos[4] = {k, 0, 0, 0};
    llama_batch_ext_set_pos(b, idx, pos);
    llama_batch_ext_set_embd_token(
        b, idx, llama_embd{h.data() + static_cast<size_t>(k - 1) * W, 1, static_cast<size_t>(W)});
    llama_batch_ext_set_output_logits(b, idx, true);
  }
  if (llama_process(ctx_d, LLAMA_PROCESS_TYPE_DECODE, b) != 0) return 1;
  const int V = llama_vocab_n_tokens(llama_model_get_vocab(draft));
  std::FILE* out = std::fopen(argv[4], "wb");
  for (int i = 0; i < T - 1; ++i) std::fwrite(llama_get_logits_ith(ctx_d, i), 4, V, out);
  std::fclose(out);
  std::printf("%d rows of %d logits (hidden row %d)\n", T - 1, V, W);
  llama_batch_ext_free(b);
  llama_free(ctx_d);
  llama_free(ctx_t);
  llama_model_free(draft);
  llama_model_free(target);
  return 0;
}
