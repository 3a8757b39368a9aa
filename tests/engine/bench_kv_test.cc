// `dsv4 bench` KV-pruner figures, through the CLI on the tiny seed checkpoints
// (tests/data/seed): the machine-readable last line keeps its leading fields
// and appends kv_entries, kv_entries_unpruned, kv_bytes, kv_bytes_unpruned and
// kv_peak_entries for models whose caches can evict entries. Also the
// bandwidth probe's placement (after each decode run).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace dsv4 {
namespace {

struct BenchOut {
  int rc = -1;
  std::string text;
  std::map<std::string, std::string> last;  // key=value fields of the last line
  std::vector<std::string> keys;            // in order
};

// dir: a checkpoint directory under tests/data.
BenchOut RunBenchArgs(const std::string& dir, const std::string& args) {
  const std::string cmd =
      std::string(DSV4_BIN) + " bench -m " + DSV4_TEST_DATA_DIR + "/" + dir + " " + args + " 2>&1";
  BenchOut out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out.text += buf;
  out.rc = ::pclose(p);
  std::string line, last;
  std::istringstream lines(out.text);
  while (std::getline(lines, line)) {
    if (!line.empty()) last = line;
  }
  std::istringstream fields(last);
  std::string f;
  while (fields >> f) {
    const size_t eq = f.find('=');
    if (eq == std::string::npos) continue;
    out.keys.push_back(f.substr(0, eq));
    out.last[f.substr(0, eq)] = f.substr(eq + 1);
  }
  return out;
}

BenchOut RunBench(const std::string& profile, const std::string& extra) {
  return RunBenchArgs("seed/" + profile,
                      "--prompt-len 10 --gen 6 --repeat 1 --probe-mib 0 --threads 1 " + extra);
}

int64_t Int(const BenchOut& b, const std::string& key) {
  auto it = b.last.find(key);
  return it == b.last.end() ? -1 : std::stoll(it->second);
}

// P-V4-7B: 2 layers, 2 KV heads of 8 dims, f32 → 2·2·16·4 = 256 bytes per entry;
// its config's kv_budget is 8 of the 16 tokens a 10 + 6 run holds.
constexpr int64_t kBytesPerEntry = 256;

TEST(BenchKv, S059_PrunerOnKeepsTheBudgetAndReportsWhatItSaved) {
  const BenchOut b = RunBench("P-V4-7B", "");
  ASSERT_EQ(b.rc, 0) << b.text;
  // The existing fields first, in their order; the KV fields appended.
  const std::vector<std::string> want = {
      "prefill_tps",         "decode_tps",       "weight_bytes_per_token", "bandwidth_gbs",
      "decode_efficiency",   "peak_rss_mb",      "prefill_gflops",         "peak_gflops",
      "prefill_efficiency",  "peak_fp32_gflops", "peak_bf16dot_gflops",    "bf16dot_mac_share",
      "decode_major_faults", "kv_entries",       "kv_entries_unpruned",    "kv_bytes",
      "kv_bytes_unpruned",   "kv_peak_entries"};
  EXPECT_EQ(b.keys, want) << b.text;
  EXPECT_GE(Int(b, "decode_major_faults"), 0);  // a count (−1: missing)
  EXPECT_EQ(Int(b, "kv_entries_unpruned"), 16);
  EXPECT_LE(Int(b, "kv_entries"), 8);
  EXPECT_GT(Int(b, "kv_entries"), 0);
  EXPECT_EQ(Int(b, "kv_bytes"), Int(b, "kv_entries") * kBytesPerEntry);
  EXPECT_EQ(Int(b, "kv_bytes_unpruned"), 16 * kBytesPerEntry);
  EXPECT_GE(Int(b, "kv_peak_entries"), Int(b, "kv_entries"));
  EXPECT_NE(b.text.find("pruner on"), std::string::npos) << b.text;
}

TEST(BenchKv, S059_SmallerBudgetKeepsFewer) {
  const BenchOut b = RunBench("P-V4-7B", "--kv-budget 4");
  ASSERT_EQ(b.rc, 0) << b.text;
  EXPECT_LE(Int(b, "kv_entries"), 4);
  EXPECT_EQ(Int(b, "kv_entries_unpruned"), 16);
}

TEST(BenchKv, PrunerOffKeepsEveryEntry) {
  const BenchOut b = RunBench("P-V4-7B", "--kv-pruner off");
  ASSERT_EQ(b.rc, 0) << b.text;
  EXPECT_EQ(Int(b, "kv_entries"), 16);
  EXPECT_EQ(Int(b, "kv_bytes"), Int(b, "kv_bytes_unpruned"));
  EXPECT_NE(b.text.find("pruner off"), std::string::npos) << b.text;
}

TEST(BenchKv, ModelWithoutPrunerReportsItsFullCacheAndRefusesPrunerOn) {
  const BenchOut b = RunBench("P-V4", "");
  ASSERT_EQ(b.rc, 0) << b.text;
  EXPECT_EQ(Int(b, "kv_entries"), Int(b, "kv_entries_unpruned"));
  EXPECT_EQ(Int(b, "kv_entries"), 16);
  const BenchOut on = RunBench("P-V4", "--kv-pruner on");
  EXPECT_NE(on.rc, 0);
  EXPECT_NE(on.text.find("no SemanticKVPruner"), std::string::npos) << on.text;
}

// With the probe on, it runs after each decode run, and the efficiency
// compares each run with the probe after it (a DeepSeek-V4 checkpoint: its
// weight bytes per token are known).
TEST(BenchKv, ProbesAfterEveryDecodeRun) {
  const BenchOut b = RunBenchArgs("deepseek_v4/swa_fp8",
                                  "--prompt-len 10 --gen 6 --repeat 3 --probe-mib 16 --threads 1");
  ASSERT_EQ(b.rc, 0) << b.text;
  EXPECT_NE(b.text.find("median of 3 probes, one after each decode run"), std::string::npos)
      << b.text;
  EXPECT_GT(std::stod(b.last.at("bandwidth_gbs")), 0.0) << b.text;
  EXPECT_GT(std::stod(b.last.at("decode_efficiency")), 0.0) << b.text;
}

TEST(BenchKv, BadPrunerPolicyIsAnError) {
  const BenchOut b = RunBench("P-V4-7B", "--kv-pruner maybe");
  EXPECT_NE(b.rc, 0);
  EXPECT_NE(b.text.find("--kv-pruner"), std::string::npos) << b.text;
}

}  // namespace
}  // namespace dsv4
