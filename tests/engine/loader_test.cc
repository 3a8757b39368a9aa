// LoadModel's stop ids (LoadedModel::stop_ids): a checkpoint directory stops
// at its generation_config.json `eos_token_id` (an id or a list), else at its
// config's EOS, and never at BOS; llama2.c story models also stop at BOS.
// Bundled models load by name, the default is the DeepSeek-V4 student, and a
// checkpoint directory finds a llama2.c tokenizer (tok512.bin) beside it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/generate.h"
#include "engine/loader.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

const std::string kModels = std::string(DSV4_SOURCE_DIR) + "/models/stories260K/";
const std::string kV4 = std::string(DSV4_TEST_DATA_DIR) + "/deepseek_v4/";

// A copy of a tiny DeepSeek-V4 checkpoint directory (weights linked) with an
// optional generation_config.json.
class V4Dir {
 public:
  V4Dir(const std::string& name, const std::string& generation_config,
        const std::string& tokenizer = "") {
    dir_ = fs::temp_directory_path() /
           ("dsv4_loader_test_" + name + "_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(kV4 + name + "/config.json", dir_ / "config.json");
    fs::create_symlink(kV4 + name + "/model.safetensors", dir_ / "model.safetensors");
    if (!generation_config.empty()) {
      std::ofstream(dir_ / "generation_config.json") << generation_config;
    }
    if (!tokenizer.empty()) fs::copy_file(kModels + "tok512.bin", dir_ / tokenizer);
  }
  ~V4Dir() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

Result<LoadedModel> Load(const std::string& path) {
  LoadOptions o;
  o.model_path = path;
  o.threads = 1;
  return LoadModel(o);
}

// A deepseek4 GGUF with its NextN MTP file (--model-draft): the model drafts;
// the file's chat template (llama.cpp's DeepSeek-V4 Jinja) comes with it.
const std::string kMtp = kV4 + "gguf_mtp/";

Result<LoadedModel> LoadWithDraft(const std::string& path, const std::string& draft) {
  LoadOptions o;
  o.model_path = path;
  o.draft_model_path = draft;
  o.threads = 1;
  return LoadModel(o);
}

TEST(LoaderGgufDraft, MtpFileMakesTheModelADraftModel) {
  auto plain = Load(kMtp + "tiny.gguf");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->model->draft_model(), nullptr);
  EXPECT_NE(plain->chat_template.find("<｜Assistant｜>"), std::string::npos);
  auto m = LoadWithDraft(kMtp + "tiny.gguf", kMtp + "mtp-tiny.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NE(m->model->draft_model(), nullptr);
  EXPECT_EQ(m->chat_template, plain->chat_template);
}

TEST(LoaderGgufDraft, DraftForAnotherKindOfModelIsRefused) {
  auto dir = LoadWithDraft(kV4 + "swa_bf16", kMtp + "mtp-tiny.gguf");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("--model-draft applies to deepseek4 GGUF models"),
            std::string::npos)
      << dir.status().ToString();
  auto llama = LoadWithDraft(kModels + "stories260K.gguf", kMtp + "mtp-tiny.gguf");
  ASSERT_FALSE(llama.ok());
  EXPECT_EQ(llama.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(llama.status().message().find("architecture is 'llama'"), std::string::npos)
      << llama.status().ToString();
  auto missing = LoadWithDraft(kMtp + "tiny.gguf", kMtp + "no-such-mtp.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-mtp.gguf: no such file"), std::string::npos);
}

TEST(LoaderStopIds, Llama2cStoriesStopAtEosAndBos) {
  auto m = Load(kModels + "stories260K.bin");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->stop_ids, (std::vector<int32_t>{2, 1}));
}

TEST(LoaderStopIds, GgufStopsAtEosOnly) {
  auto m = Load(kModels + "stories260K.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->stop_ids, (std::vector<int32_t>{2}));
  EXPECT_FALSE(m->IsStop(1));  // BOS
}

TEST(LoaderStopIds, DeepSeekV4UsesConfigEosWithoutGenerationConfig) {
  V4Dir dir("swa_bf16", "");
  auto m = Load(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->stop_ids, (std::vector<int32_t>{1}));
  EXPECT_FALSE(m->IsStop(m->model->info().bos_id));
}

TEST(LoaderStopIds, DeepSeekV4ReadsGenerationConfigIdOrList) {
  {
    V4Dir dir("swa_bf16", R"({"bos_token_id": 0, "eos_token_id": 7})");
    auto m = Load(dir.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->stop_ids, (std::vector<int32_t>{7}));
  }
  {
    V4Dir dir("swa_bf16", R"({"eos_token_id": [1, 9, 200]})");
    auto m = Load(dir.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->stop_ids, (std::vector<int32_t>{1, 9, 200}));
  }
}

TEST(LoaderStopIds, BadGenerationConfigNamesTheFileAndField) {
  for (const char* text : {R"({"eos_token_id": "x"})", R"({"eos_token_id": [1, -3]})", "[1]"}) {
    V4Dir dir("swa_bf16", text);
    auto m = Load(dir.path());
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(m.status().message().find("generation_config.json"), std::string::npos)
        << m.status().ToString();
    if (std::string(text) != "[1]") {
      EXPECT_NE(m.status().message().find("eos_token_id"), std::string::npos)
          << m.status().ToString();
    }
  }
}

// Generation ends at a stop id from generation_config.json (not emitted), and
// a DeepSeek-V4 model runs through BOS.
TEST(LoaderStopIds, GenerationStopsAtTheCheckpointsStopIds) {
  const std::vector<int32_t> prompt = {0, 17, 42, 99, 5};
  GenerateOptions g;
  g.max_tokens = 12;
  g.sampling.temperature = 0.0f;
  std::vector<int32_t> free_run;
  {
    V4Dir dir("swa_bf16", R"({"eos_token_id": []})");
    auto m = Load(dir.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_TRUE(m->stop_ids.empty());
    auto st = Generate(*m, prompt, g, [&](int32_t id, std::string_view) {
      if (id >= 0) free_run.push_back(id);
    });
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_EQ(free_run.size(), 12u);
  }
  // Stop at the fourth greedy token: the first three are emitted.
  const int32_t stop = free_run[3];
  const auto first = std::find(free_run.begin(), free_run.end(), stop) - free_run.begin();
  V4Dir dir("swa_bf16", "{\"eos_token_id\": [250, " + std::to_string(stop) + "]}");
  auto m = Load(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<int32_t> out;
  auto st = Generate(*m, prompt, g, [&](int32_t id, std::string_view) {
    if (id >= 0) out.push_back(id);
  });
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->stop_reason, "eos");
  EXPECT_EQ(out, std::vector<int32_t>(free_run.begin(), free_run.begin() + first));
}

TEST(LoaderBundled, NamesStandForTheBundledModels) {
  const std::string llama = BundledModelPath("stories260K");
  ASSERT_FALSE(llama.empty());
  EXPECT_TRUE(fs::equivalent(llama, kModels + "stories260K.bin")) << llama;
  const std::string student = BundledModelPath("deepseek_v4_stories");
  ASSERT_FALSE(student.empty());
  EXPECT_TRUE(fs::equivalent(student, std::string(DSV4_SOURCE_DIR) + "/models/deepseek_v4_stories"))
      << student;
  EXPECT_EQ(DefaultModelPath(), student);
  // Paths and unknown names are not names.
  for (const char* bad : {"", ".", "..", "models/stories260K", "stories260K/", "no_such_model"}) {
    EXPECT_EQ(BundledModelPath(bad), "") << bad;
  }
}

TEST(LoaderBundled, LoadByNameAndTheDefault) {
  auto llama = Load("stories260K");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_EQ(llama->format, "llama2c");
  auto student = Load("");  // the default: the DeepSeek-V4 student with tok512
  ASSERT_TRUE(student.ok()) << student.status().ToString();
  EXPECT_EQ(student->format, "safetensors");
  EXPECT_EQ(student->model->info().architecture, "deepseek_v4");
  ASSERT_NE(student->tokenizer, nullptr);
  EXPECT_EQ(student->tokenizer->Encode("Once upon a time", true),
            llama->tokenizer->Encode("Once upon a time", true));
  // It stops where its teacher's stories end: EOS and BOS (generation_config.json).
  EXPECT_TRUE(student->IsStop(1));
  EXPECT_TRUE(student->IsStop(2));
  auto unknown = Load("no_such_model");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("no_such_model: no such file or directory"),
            std::string::npos)
      << unknown.status().ToString();
  EXPECT_NE(unknown.status().hint().find("bundled models by name: deepseek_v4_stories"),
            std::string::npos)
      << unknown.status().ToString();
}

// A checkpoint directory without tokenizer.json takes a llama2.c tok512.bin
// beside it (the student's layout, checked in LoadByNameAndTheDefault); one
// whose pieces outnumber the model's vocabulary is refused by name.
TEST(LoaderBundled, Tok512BesideACheckpointMustFitItsVocabulary) {
  {
    V4Dir dir("swa_bf16", "");
    auto m = Load(dir.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->tokenizer, nullptr);  // token ids only
  }
  V4Dir dir("swa_bf16", "", "tok512.bin");  // 512 pieces, vocab_size 256
  auto m = Load(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("tok512.bin: 2641 bytes left over after the model's 256 "
                                      "tokens"),
            std::string::npos)
      << m.status().ToString();
}

}  // namespace
}  // namespace dsv4
