// The dsv4 binary as a user runs it: exit codes, one-line errors, output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

struct Output {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs dsv4 with `args`, and `env` (NAME=VALUE ...) added to its environment.
Output RunDsv4(const std::string& args, const std::string& env = "") {
  const std::string cmd =
      (env.empty() ? "" : "env " + env + " ") + std::string(DSV4_BIN) + " " + args + " 2>&1";
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

int CountLines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, RunStories260KByNamePrintsItsStory) {
  Output o = RunDsv4("run --model stories260K --temperature 0 --max-tokens 40");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(o.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << o.out;
}

// The default model is the bundled DeepSeek-V4 student (models/deepseek_v4_stories):
// a story of its own, from the default prompt, in words.
TEST(Cli, RunDefaultModelIsTheDeepSeekV4Student) {
  const std::string args = " --temperature 0 --max-tokens 60";
  Output o = RunDsv4("run" + args);
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(o.out, RunDsv4("run --model deepseek_v4_stories" + args).out);
  EXPECT_NE(o.out, RunDsv4("run --model stories260K" + args).out);
  EXPECT_EQ(o.out.rfind("Once upon a time", 0), 0u) << o.out;
  std::istringstream words(o.out);
  int n = 0;
  for (std::string w; words >> w;) n += w.find_first_of("abcdefghijklmnopqrstuvwxyz") != w.npos;
  EXPECT_GE(n, 25) << o.out;
  Output info = RunDsv4("inspect --model deepseek_v4_stories");
  EXPECT_EQ(info.exit_code, 0) << info.out;
  EXPECT_NE(info.out.find("csa"), std::string::npos) << info.out;
}

TEST(Cli, SeededSamplingIsReproducible) {
  Output a = RunDsv4("run --seed 7 --max-tokens 60 --prompt 'The dog'");
  Output b = RunDsv4("run --seed 7 --max-tokens 60 --prompt 'The dog'");
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out.rfind("The dog", 0), 0u) << a.out;
}

TEST(Cli, HelpListsCommands) {
  Output o = RunDsv4("--help");
  EXPECT_EQ(o.exit_code, 0);
  for (const char* cmd : {"run", "perplexity", "bench"}) {
    EXPECT_NE(o.out.find(cmd), std::string::npos) << cmd;
  }
  EXPECT_EQ(RunDsv4("run --help").exit_code, 0);
}

TEST(Cli, LspFlagErrorsAreOneLine) {
  Output fim = RunDsv4("lsp --fim sometimes < /dev/null");
  EXPECT_EQ(fim.exit_code, 2) << fim.out;
  EXPECT_NE(fim.out.find("dsv4: error: --fim must be auto, on or off"), std::string::npos)
      << fim.out;
  Output url = RunDsv4("lsp --server 127.0.0.1:8080 < /dev/null");
  EXPECT_EQ(url.exit_code, 2) << url.out;
  EXPECT_NE(url.out.find("--server must be an http:// or https:// URL"), std::string::npos)
      << url.out;
  Output both = RunDsv4("lsp --server http://127.0.0.1:1 --model x.gguf < /dev/null");
  EXPECT_EQ(both.exit_code, 2) << both.out;
  EXPECT_NE(both.out.find("--server and --model are both given"), std::string::npos) << both.out;
}

TEST(Cli, LspEndOfInputWithoutShutdownExitsOne) {
  // The LSP asks for exit code 1 when the server was not shut down first.
  Output o = RunDsv4("lsp --server http://127.0.0.1:1 < /dev/null");
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_EQ(o.out, "");  // nothing on stdout without a request
}

TEST(Cli, PerplexityPrintsOneFinalLine) {
  Output o = RunDsv4(std::string("perplexity --file ") + DSV4_TEST_DATA_DIR +
                     "/text/tinystories_sample.txt");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  double nll = 0, ppl = 0;
  long long tokens = 0;
  ASSERT_EQ(std::sscanf(o.out.c_str(), "nll=%lf ppl=%lf tokens=%lld", &nll, &ppl, &tokens), 3)
      << o.out;
  EXPECT_GT(tokens, 500);
  EXPECT_GT(nll, 0.0);
  EXPECT_LT(ppl, 20.0);  // stories260K knows TinyStories
}

TEST(Cli, BenchLastLineIsMachineReadable) {
  Output o = RunDsv4("bench --prompt-len 16 --gen 8 --repeat 1 --threads 1");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("prefill_tps="), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("decode_tps="), std::string::npos) << o.out;
}

// With several runs, every run's prefill and decode speeds are listed, in order.
TEST(Cli, BenchListsEveryRun) {
  Output o = RunDsv4("bench --prompt-len 8 --gen 4 --repeat 3 --threads 1 --probe-mib 0");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  const size_t at = o.out.find("runs (prefill / decode tokens/s):");
  ASSERT_NE(at, std::string::npos) << o.out;
  const size_t colon = o.out.find(':', at);
  std::istringstream runs(o.out.substr(colon + 1, o.out.find('\n', at) - colon - 1));
  int n = 0;
  for (std::string run; runs >> run; ++n) {
    double prefill = 0.0, decode = 0.0;
    char slash = 0;
    std::istringstream one(run);
    EXPECT_TRUE(one >> prefill >> slash >> decode && slash == '/') << run;
    EXPECT_GT(prefill, 0.0) << run;
    EXPECT_GT(decode, 0.0) << run;
  }
  EXPECT_EQ(n, 3) << o.out;
}

// DSV4_KERNELS=portable (base/env.h) turns the hand-written x86 kernels off:
// the embedded f32 model's one-token products then run on the Highway kernels,
// whose bits the AVX-512 matvecs give, so the greedy story is the same. An
// unknown value is a warning, and the default kernels run.
TEST(Cli, PortableKernelsTellTheSameStory) {
  const std::string args = "run --model stories260K --temperature 0 --max-tokens 40";
  const Output native = RunDsv4(args);
  ASSERT_EQ(native.exit_code, 0) << native.out;
  const Output portable = RunDsv4(args + " --threads 1", "DSV4_KERNELS=portable");
  EXPECT_EQ(portable.exit_code, 0) << portable.out;
  EXPECT_EQ(portable.out, native.out);
  const Output unknown = RunDsv4(args, "DSV4_KERNELS=fastest");
  EXPECT_EQ(unknown.exit_code, 0) << unknown.out;
  EXPECT_NE(unknown.out.find("DSV4_KERNELS=fastest: unknown value"), std::string::npos)
      << unknown.out;
}

// Both --kquant-activations values run a k-quant GGUF (the tiny Q4_K_M model).
TEST(Cli, KQuantActivationsChooseThePath) {
  const std::string model = std::string(DSV4_TEST_DATA_DIR) + "/kquant/tiny_llama_q4_k_m.gguf";
  for (const char* a : {"q8_K", "f32"}) {
    Output o = RunDsv4("bench --model " + model + " --kquant-activations " + a +
                       " --prompt-len 8 --gen 4 --repeat 1 --threads 1 --probe-mib 0");
    EXPECT_EQ(o.exit_code, 0) << a << ": " << o.out;
    EXPECT_NE(o.out.find("decode_tps="), std::string::npos) << a << ": " << o.out;
  }
}

TEST(Cli, MissingModelIsOneLineExit2) {
  Output o = RunDsv4("run --model /nonexistent/model.bin");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.out.find("/nonexistent/model.bin"), std::string::npos) << o.out;
  EXPECT_LE(CountLines(o.out), 2) << o.out;  // error + hint
}

TEST(Cli, GarbledModelFilesAreOneLineExit2) {
  const std::string cases[][2] = {
      {"bad_magic.gguf", std::string("GGUX\x03\x00\x00\x00", 8) + std::string(64, '\0')},
      {"short.gguf", "GGUF"},
      {"short.bin", std::string("\x40\x00\x00\x00", 4)},
      {"truncated.bin", std::string("\x40\x00\x00\x00\xac\x00\x00\x00\x05\x00\x00\x00\x08\x00"
                                    "\x00\x00\x04\x00\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00",
                                    28) +
                            std::string(100, '\0')},
      {"unknown.xyz", "hello"},
  };
  for (const auto& c : cases) {
    const std::string path = WriteTemp(c[0], c[1]);
    Output o = RunDsv4("run --model " + path);
    EXPECT_EQ(o.exit_code, 2) << c[0] << ": " << o.out;
    EXPECT_NE(o.out.find(path), std::string::npos) << c[0] << ": " << o.out;
    EXPECT_NE(o.out.find("dsv4: error:"), std::string::npos) << o.out;
    EXPECT_LE(CountLines(o.out), 2) << o.out;
  }
}

TEST(Cli, BadFlagsExit2) {
  EXPECT_EQ(RunDsv4("run --max-tokens -5").exit_code, 2);
  EXPECT_EQ(RunDsv4("frobnicate").exit_code, 2);
  EXPECT_EQ(RunDsv4("perplexity").exit_code, 2);  // --file is required
  {
    Output k = RunDsv4("run --kquant-activations q4 --max-tokens 1");
    EXPECT_EQ(k.exit_code, 2) << k.out;
    EXPECT_NE(k.out.find("q8_K,f32"), std::string::npos) << k.out;  // says what it takes
  }
  Output o = RunDsv4("perplexity --file /nonexistent.txt");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.out.find("/nonexistent.txt"), std::string::npos) << o.out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The last row of a golden logits file [T, vocab] (f32) of a checkpoint
// directory, T being the number of ids in `ids` (space-separated).
std::vector<float> LastGoldenRow(const std::string& file, const std::string& ids) {
  const std::string bytes = ReadFile(file);
  std::vector<float> g(bytes.size() / 4);
  std::memcpy(g.data(), bytes.data(), g.size() * 4);
  size_t n_ids = 1;
  for (char c : ids) n_ids += c == ' ';
  const size_t vocab = g.size() / n_ids;
  return std::vector<float>(g.end() - static_cast<std::ptrdiff_t>(vocab), g.end());
}

TEST(Cli, TokenizeWithEveryTokenizerKind) {
  const std::string data = DSV4_TEST_DATA_DIR;
  const std::string models = std::string(DSV4_TEST_DATA_DIR) + "/../../models/stories260K/";
  // Expected ids: the DeepSeek-V4 tokenizer.json (HF tokenizers) and stories260K (run.c).
  Output v4 =
      RunDsv4("tokenize --tokenizer " + data +
              "/tokenizer/deepseek_v4_tokenizer.json.gz "
              "'<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>'");
  EXPECT_EQ(v4.exit_code, 0) << v4.out;
  EXPECT_EQ(v4.out, "128803 30594 128804 128821 36101 128822 7624 1\n");
  for (const char* tok : {"stories260K.gguf", "tok512.bin"}) {
    Output o = RunDsv4("tokenize --bos --tokenizer " + models + tok + " 'Once upon a time'");
    EXPECT_EQ(o.out, "1 403 407 261 378\n") << tok;
  }
  Output bad = RunDsv4("tokenize --tokenizer /nonexistent.json hi");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("/nonexistent.json"), std::string::npos);
}

TEST(Cli, ChatTemplateMatchesOfficialCasesExactly) {
  const std::string dir = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/dsv4_encoding/";
  for (const char* c : {"case1", "case2"}) {
    const std::string cmd = "chat-template --messages " + dir + c + ".input.json";
    const std::string full = std::string(DSV4_BIN) + " " + cmd;
    FILE* p = popen(full.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    EXPECT_EQ(pclose(p), 0);
    EXPECT_EQ(out, ReadFile(dir + c + ".expected.txt")) << c;
  }
  Output bad = RunDsv4("chat-template --messages " + dir + "case1.input.json --mode sideways");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  const std::string broken = WriteTemp("broken.json", "{\"messages\": [{\"role\": \"wizard\"}]}");
  bad = RunDsv4("chat-template --messages " + broken);
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("wizard"), std::string::npos) << bad.out;
}

// A deepseek_v41 model directory selects the V4.1 encoding (--encoding
// without one); its reasoning effort is checked and named.
TEST(Cli, ChatTemplateV41FromTheModelDirectory) {
  const std::string dir = ::testing::TempDir() + "v41_model";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"model_type": "deepseek_v41"})";
  const std::string messages =
      WriteTemp("v41_messages.json", R"([{"role": "system", "content": "S"},
                                         {"role": "user", "content": "hi"}])");
  const std::string expected =
      "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 50 (range 1-100, the higher the "
      "value, the more thorough the reasoning)\n\nS<｜User｜>hi<｜Assistant｜><think>";
  Output o = RunDsv4("chat-template --messages " + messages + " --model " + dir +
                     " --reasoning-effort low");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(o.out, expected);
  o = RunDsv4("chat-template --messages " + messages + " --encoding dsv41 --reasoning-effort low");
  EXPECT_EQ(o.out, expected);
  o = RunDsv4("chat-template --messages " + messages + " --encoding dsv41 --reasoning-effort 0");
  EXPECT_EQ(o.exit_code, 2) << o.out;
  EXPECT_NE(o.out.find("--reasoning-effort"), std::string::npos) << o.out;
}

TEST(Cli, IdsInIdsOut) {
  // Greedy ids from BOS equal llama2.c's (tests/data/stories260K/greedy256_ids.txt).
  Output o =
      RunDsv4("run --model stories260K --prompt-ids 1 --print-ids --temperature 0 --max-tokens 8");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(o.out, "403 407 261 378 432 383 286 261\n");
  // logits: top-5 per position, as the oracle lists them for position 0.
  o = RunDsv4("logits --model stories260K --prompt-ids '1 403' --top-k 2");
  int pos[2], id[4];
  float logit[4];
  ASSERT_EQ(std::sscanf(o.out.c_str(), "%d %d:%f %d:%f\n%d %d:%f %d:%f", &pos[0], &id[0], &logit[0],
                        &id[1], &logit[1], &pos[1], &id[2], &logit[2], &id[3], &logit[3]),
            10)
      << o.out;
  EXPECT_EQ(pos[0], 0);
  EXPECT_EQ(pos[1], 1);
  const int want_id[4] = {403, 385, 407, 383};
  const float want_logit[4] = {17.023516f, 15.406213f, 18.459986f, 14.291061f};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(id[i], want_id[i]);
    EXPECT_NEAR(logit[i], want_logit[i], 1e-4);
  }
  // perplexity --ids scores the ids as one document.
  const std::string ids = WriteTemp("ids.txt", "1 403 407 261\n378 432\n");
  o = RunDsv4("perplexity --ids " + ids);
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("tokens=5"), std::string::npos) << o.out;
  // Bad ids are errors naming the flag or file.
  o = RunDsv4("logits --prompt-ids '1 -3'");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.out.find("--prompt-ids"), std::string::npos) << o.out;
  const std::string bad = WriteTemp("bad_ids.txt", "1 2 three");
  o = RunDsv4("perplexity --ids " + bad);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.out.find(bad), std::string::npos) << o.out;
  o = RunDsv4("run --prompt-ids '1 99999' --max-tokens 1");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.out.find("99999"), std::string::npos) << o.out;
}

TEST(Cli, RunsADeepSeekV4CheckpointDirectory) {
  const std::string dir = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/swa_bf16";
  const std::string ids = ReadFile(dir + "/input_ids.txt");
  Output o =
      RunDsv4("run --model " + dir + " --prompt-ids '" + ids + "' --max-tokens 4 --temperature 0");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  int count = 0;
  for (char c : o.out) count += c == ' ';
  EXPECT_EQ(count, 3) << o.out;  // four ids
  // The greedy first id is the argmax of the golden logits' last row.
  const std::vector<float> last = LastGoldenRow(dir + "/logits.f32", ids);
  const int want = static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin());
  EXPECT_EQ(std::stoi(o.out), want) << o.out;
  // Without a tokenizer, a text prompt is a clear error.
  o = RunDsv4("run --model " + dir + " --prompt hello");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.out.find("--prompt-ids"), std::string::npos) << o.out;
}

// --wo-a-input on the FP8 checkpoint: with f32 the last position's top
// logit is its QAT-on fp32 golden's (the fp32 reference path); bf16 (the
// default for this checkpoint) moves it by the released code's rounding;
// anything else is a one-line usage error.
TEST(Cli, WoAInputChoosesTheAttentionOutputType) {
  const std::string dir = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/swa_fp8";
  const std::string ids = ReadFile(dir + "/input_ids.txt");
  const std::vector<float> last = LastGoldenRow(dir + "/logits_qat_fp32.f32", ids);
  for (const char* type : {"f32", "bf16"}) {
    Output o = RunDsv4("logits --model " + dir + " --wo-a-input " + type + " --prompt-ids '" + ids +
                       "' --top-k 1");
    ASSERT_EQ(o.exit_code, 0) << type << ": " << o.out;
    // The last line: "POSITION ID:LOGIT".
    const size_t line = o.out.find_last_of('\n', o.out.size() - 2) + 1;
    const size_t colon = o.out.find(':', line);
    ASSERT_NE(colon, std::string::npos) << o.out;
    const int id = std::stoi(o.out.substr(o.out.find(' ', line) + 1));
    const float logit = std::stof(o.out.substr(colon + 1));
    ASSERT_GE(id, 0);
    ASSERT_LT(static_cast<size_t>(id), last.size());
    if (std::string(type) == "f32") {
      EXPECT_NEAR(logit, last[id], 1e-3f) << o.out;
      EXPECT_EQ(id, std::max_element(last.begin(), last.end()) - last.begin()) << o.out;
    } else {
      EXPECT_GT(std::fabs(logit - last[id]), 1e-3f) << o.out;
    }
  }
  Output bad = RunDsv4("run --model " + dir + " --wo-a-input f16 --prompt-ids '1' --max-tokens 1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--wo-a-input"), std::string::npos) << bad.out;
  EXPECT_LE(CountLines(bad.out), 2) << bad.out;
}

TEST(Cli, RunsAndInspectsEverySeedProfile) {
  for (const char* profile : {"P-V4", "P-CED", "P-V4-7B"}) {
    const std::string dir = std::string(DSV4_TEST_DATA_DIR) + "/seed/" + profile;
    Output o = RunDsv4("run --model " + dir + " --prompt 'Once upon' --max-tokens 8 --seed 1");
    EXPECT_EQ(o.exit_code, 0) << profile << ": " << o.out;
    EXPECT_EQ(o.out.rfind("Once upon", 0), 0u) << o.out;
    o = RunDsv4("inspect --model " + dir);
    EXPECT_EQ(o.exit_code, 0) << o.out;
    EXPECT_NE(o.out.find(std::string("profile ") + profile), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("parameters"), std::string::npos) << o.out;
  }
}

// `serve` takes the runtime policies `run` takes (one shared declaration): the
// help lists them, and they reach the model before the server binds — a bad
// --kv-budget (0 once meant 1) or --kv-pruner on for a model without a pruner
// ends with one error naming the flag, the value and the minimum.
TEST(Cli, ServeAndRunTakeTheSeedRuntimeOptions) {
  const std::string help = RunDsv4("serve --help").out;
  for (const char* flag :
       {"--router-capacity", "--expert-mask", "--force-experts", "--freeze-router",
        "--reweight-router", "--kv-pruner", "--kv-budget", "--ced-dispatch", "--ced-min-batch"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
    EXPECT_NE(RunDsv4("run --help").out.find(flag), std::string::npos) << flag;
  }
  const std::string seed = std::string(DSV4_TEST_DATA_DIR) + "/seed/";
  for (const char* cmd : {"serve --port 0", "run --max-tokens 2"}) {
    SCOPED_TRACE(cmd);
    Output o = RunDsv4(std::string(cmd) + " --model " + seed + "P-V4-7B --kv-budget 0");
    EXPECT_EQ(o.exit_code, 2) << o.out;
    EXPECT_NE(o.out.find("--kv-budget 0 is below this model's minimum of 4"), std::string::npos)
        << o.out;
    EXPECT_LE(CountLines(o.out), 2) << o.out;
    o = RunDsv4(std::string(cmd) + " --model " + seed + "P-V4 --kv-pruner on");
    EXPECT_EQ(o.exit_code, 2) << o.out;
    EXPECT_NE(o.out.find("--kv-pruner on: this model has no SemanticKVPruner"), std::string::npos)
        << o.out;
    o = RunDsv4(std::string(cmd) + " --model " + seed + "P-V4 --expert-mask 99");
    EXPECT_EQ(o.exit_code, 2) << o.out;
    EXPECT_NE(o.out.find("--expert-mask: expert 99"), std::string::npos) << o.out;
  }
}

// `inspect --routing-stats FILE`: the student's expert-use histogram for each of
// its MoE layers and the indexer's picks for its CSA layers; a model that does not
// count them and a missing file are named errors.
TEST(Cli, InspectRoutingStats) {
  const std::string text = std::string(DSV4_TEST_DATA_DIR) + "/text/tinystories_sample.txt";
  Output o = RunDsv4("inspect --model deepseek_v4_stories --routing-stats " + text);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("routing statistics of"), std::string::npos) << o.out;
  for (const char* line :
       {"layer  0 hash", "layer  1 scored", "layer  2 scored", "layer  3 scored"}) {
    EXPECT_NE(o.out.find(line), std::string::npos) << line << "\n" << o.out;
  }
  EXPECT_EQ(o.out.find("layer  4 draft"), std::string::npos) << o.out;  // the MTP layer did not run
  const size_t indexer = o.out.find("\nindexer:");
  ASSERT_NE(indexer, std::string::npos) << o.out;
  EXPECT_NE(o.out.find("layer  1 ", indexer), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("layer  3 ", indexer), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("layer  2 ", indexer), std::string::npos) << o.out;  // HCA: no indexer
  Output llama = RunDsv4("inspect --model stories260K --routing-stats " + text);
  EXPECT_EQ(llama.exit_code, 2) << llama.out;
  EXPECT_NE(llama.out.find("does not count its routing and indexer choices"), std::string::npos)
      << llama.out;
  Output missing = RunDsv4("inspect --model deepseek_v4_stories --routing-stats /nonexistent.txt");
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_NE(missing.out.find("/nonexistent.txt"), std::string::npos) << missing.out;
}

TEST(Cli, InspectsLlamaFiles) {
  const std::string models = std::string(DSV4_TEST_DATA_DIR) + "/../../models/stories260K/";
  Output o = RunDsv4("inspect --model " + models + "stories260K.bin");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("260032 parameters"), std::string::npos) << o.out;
  o = RunDsv4("inspect --model " + models + "stories260K.gguf");
  EXPECT_NE(o.out.find("architecture: llama"), std::string::npos) << o.out;
}

// `run --speculative auto` with a DSpark checkpoint: the greedy ids of a plain
// run, and the controller's choices on stderr; a bad value names the flag.
TEST(Cli, RunSpeculativeAutoWithDSpark) {
  const std::string model = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/dspark_mixed_bf16";
  const std::string args =
      "run --model " + model + " --prompt-ids '0 17 42 99 5' --max-tokens 24 --temperature 0";
  const Output plain = RunDsv4(args);
  const Output spec = RunDsv4(args + " --speculative auto");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  ASSERT_EQ(spec.exit_code, 0) << spec.out;
  const std::string ids = plain.out.substr(0, plain.out.find('\n'));
  EXPECT_EQ(spec.out.rfind(ids, 0), 0u) << spec.out;
  EXPECT_NE(spec.out.find("draft length "), std::string::npos) << spec.out;
  const Output bad = RunDsv4(args + " --speculative 2x");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--speculative '2x' is not a draft count or auto"), std::string::npos)
      << bad.out;
}

// `bench --speculative auto` on a DSpark checkpoint: the adaptive run, the
// cost of every draft length up to the block (5) and the projection table;
// a model without a draft head is refused with the cause.
TEST(Cli, BenchSpeculativeAutoReportsEachLengthsCost) {
  const std::string model = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/dspark_mixed_bf16";
  const Output o = RunDsv4("bench --model " + model +
                           " --prompt-len 8 --gen 12 --repeat 1 --probe-mib 0 --speculative auto");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("speculative (dspark, auto, up to 5 drafts per round)"), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("adaptive draft length: chose k = "), std::string::npos) << o.out;
  const size_t table = o.out.find("round cost by draft length k");
  ASSERT_NE(table, std::string::npos) << o.out;
  for (const char* row : {"\n  0  ", "\n  5  "}) {
    EXPECT_NE(o.out.find(row, table), std::string::npos) << row << o.out;
  }
  EXPECT_NE(o.out.find("projected decode by per-draft acceptance"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(" chosen_k="), std::string::npos) << o.out;
  const std::string stories = std::string(DSV4_TEST_DATA_DIR) + "/../../models/stories260K/";
  const Output none =
      RunDsv4("bench --model " + stories + "stories260K.bin --probe-mib 0 --speculative 2");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.out.find("speculative decoding needs a model with a draft head"),
            std::string::npos)
      << none.out;
}

// `run --model MAIN.gguf --model-draft DRAFT.gguf --speculative K`: the draft
// module from its own GGUF, as llama.cpp's converter writes it (NextN MTP and
// DSpark), gives the greedy ids of the same checkpoint's safetensors run;
// --model-draft beside a checkpoint directory is refused with the cause.
TEST(Cli, RunSpeculativeWithAGgufDraft) {
  const std::string data = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/";
  const std::string prompt = " --prompt-ids '0 17 42 99 5' --max-tokens 16 --temperature 0";
  for (const auto& [dir, main, draft] : {std::tuple<std::string, std::string, std::string>{
                                             "dspark_mixed_bf16", "dspark_main", "dspark"},
                                         {"mixed_mtp_bf16", "mtp_main", "mtp"}}) {
    const Output plain = RunDsv4("run --model " + data + dir + prompt);
    const Output spec =
        RunDsv4("run --model " + data + "gguf_drafts/" + main + ".gguf --model-draft " + data +
                "gguf_drafts/" + draft + ".gguf --speculative 3" + prompt);
    ASSERT_EQ(plain.exit_code, 0) << plain.out;
    ASSERT_EQ(spec.exit_code, 0) << spec.out;
    const std::string ids = plain.out.substr(0, plain.out.find('\n'));
    EXPECT_EQ(spec.out.rfind(ids, 0), 0u) << dir << ": " << spec.out;
    EXPECT_NE(spec.out.find("acceptance"), std::string::npos) << spec.out;
  }
  const Output bad = RunDsv4("run --model " + data + "mixed_mtp_bf16 --model-draft " + data +
                             "gguf_drafts/mtp.gguf" + prompt);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--model-draft applies to deepseek4 GGUF models"), std::string::npos)
      << bad.out;
}

}  // namespace
