// Unit tests of the seed-family mechanisms, one per "Test:" line of the digest
// (specs/seed-mechanisms.md group 1), named by S-id: RoPE variants, attention
// branches, HCA, CED MLP and layouts, the router, TaskAdapter, KV pruner.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include "../common/status_matchers.h"

#include "model/seed/attention.h"
#include "model/seed/ced_mlp.h"
#include "model/seed/hca.h"
#include "model/seed/kv_pruner.h"
#include "model/seed/rope.h"
#include "model/seed/router.h"
#include "model/seed/task_adapter.h"
#include "ops/ref/ops_ref.h"

namespace dsv4::seed {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

SeedConfig TinyConfig() {
  SeedConfig c;
  c.vocab_size = 16;
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.intermediate_size = 32;
  c.max_position_embeddings = 1 << 20;
  return c;
}

// ---------------------------------------------------------------- RoPE

TEST(SeedRope, S024_InvFreqIsFloat32AndAnglesMatchFloat64) {
  SeedConfig c = TinyConfig();
  RopeParams r = MakeRopeParams(c, 16);
  static_assert(std::is_same_v<decltype(r.inv_freq)::value_type, float>);
  const int64_t d = c.head_dim();
  for (int64_t i = 0; i < d / 2; ++i) {
    const double exact = 131071.0 * std::pow(10000.0, -2.0 * i / d);
    EXPECT_NEAR(131071.0 * r.inv_freq[i], exact, 1e-6 * exact);
  }
}

TEST(SeedRope, S025_S006_DynamicThetaValues) {
  EXPECT_DOUBLE_EQ(DynamicTheta(10000, 2048, 2048, 6144), 10000.0);
  EXPECT_DOUBLE_EQ(DynamicTheta(10000, 512, 2048, 6144), 10000.0);  // S-006: 10000 at L_ctx <= 2048
  EXPECT_NEAR(DynamicTheta(10000, 32768, 2048, 6144), 10009.029, 1e-3);
  EXPECT_NEAR(DynamicTheta(10000, 65536, 2048, 6144), 10011.288, 1e-3);
  EXPECT_GT(DynamicTheta(10000, 2049, 2048, 6144), 10000.0);
}

TEST(SeedRope, S025_ThetaIsFrozenPerRequest) {
  SeedConfig c = TinyConfig();
  c.dynamic_rope.enabled = true;
  c.dynamic_rope.base_len = 2048;
  c.dynamic_rope.dim = 6144;
  EXPECT_NEAR(MakeRopeParams(c, 32768).theta, 10009.029, 1e-3);
  // The theta of a request depends only on its expected context, not on how
  // many tokens have run: the cache holds one RopeParams for the whole request.
  EXPECT_EQ(MakeRopeParams(c, 32768).theta, MakeRopeParams(c, 32768).theta);
}

TEST(SeedRope, S026_LinearScalingHalvesPositions) {
  SeedConfig plain = TinyConfig(), scaled = TinyConfig();
  scaled.rope_scaling.enabled = true;
  scaled.rope_scaling.factor = 2.0;
  RopeParams a = MakeRopeParams(plain, 64), b = MakeRopeParams(scaled, 64);
  const int64_t d = plain.head_dim();
  for (int64_t p : {1, 7, 100}) {
    std::vector<float> x = Random(d, 3), y = x;
    ApplyRope(x.data(), 1, 1, d, p, a, nullptr);
    ApplyRope(y.data(), 1, 1, d, 2 * p, b, nullptr);
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(x[i], y[i], 1e-6);
  }
}

TEST(SeedRope, S027_ZeroShiftIsStandardRope) {
  SeedConfig c = TinyConfig();
  c.segmented_rope.enabled = true;
  c.segmented_rope.segment_length = 4;
  RopeParams r = MakeRopeParams(c, 64);
  const int64_t nh = 2, d = c.head_dim(), S = 11;
  std::vector<float> zero(nh * d / 2, 0.0f);
  std::vector<float> x = Random(S * nh * d, 5), y = x;
  ApplyRope(x.data(), S, nh, d, 3, r, zero.data());
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      ops::ref::RopeInterleaved(y.data() + (t * nh + h) * d, 1, d, d, 3 + t,
                                static_cast<float>(r.theta));
    }
  }
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 2e-6);
}

TEST(SeedRope, S027_SegmentPhaseIsSegmentTimesShift) {
  SeedConfig c = TinyConfig();
  c.segmented_rope.enabled = true;
  c.segmented_rope.segment_length = 4;
  RopeParams r = MakeRopeParams(c, 64);
  const int64_t nh = 2, d = c.head_dim();
  std::vector<float> shift = Random(nh * d / 2, 9);
  const int64_t p = 13;  // segment 3
  std::vector<float> x = Random(nh * d, 11), y = x;
  ApplyRope(x.data(), 1, nh, d, p, r, shift.data());
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / d) + 3.0 * shift[h * d / 2 + i];
      const double x0 = y[h * d + 2 * i], x1 = y[h * d + 2 * i + 1];
      EXPECT_NEAR(x[h * d + 2 * i], x0 * std::cos(angle) - x1 * std::sin(angle), 1e-5);
      EXPECT_NEAR(x[h * d + 2 * i + 1], x0 * std::sin(angle) + x1 * std::cos(angle), 1e-5);
    }
  }
}

TEST(SeedRope, S029_TailSegmentsMatchPerTokenExactly) {
  SeedConfig c = TinyConfig();
  c.hidden_size = 4;
  c.num_attention_heads = 1;
  c.segmented_rope.enabled = true;
  c.segmented_rope.segment_length = 2048;
  RopeParams r = MakeRopeParams(c, 1 << 18);
  std::vector<float> shift = {0.3f, -0.2f};
  for (int64_t S : {2047, 2048, 2049, 8200, 131072}) {
    // Exactly S rows: a sanitizer build catches any access past them.
    std::vector<float> x = Random(S * 4, static_cast<uint32_t>(S)), y = x;
    ApplyRope(x.data(), S, 1, 4, 0, r, shift.data());
    for (int64_t t = 0; t < S; ++t) ApplyRope(y.data() + t * 4, 1, 1, 4, t, r, shift.data());
    ASSERT_EQ(x, y) << "S = " << S;
  }
}

// ---------------------------------------------------------------- attention

struct Kv {
  std::vector<float> k, v, imp;
  std::vector<int64_t> pos;
  std::vector<int32_t> live;
  KvView view() const { return {k.data(), v.data(), imp.data(), pos.data(), live}; }
};

Kv MakeKv(int64_t n, int64_t kv_dim, uint32_t seed) {
  Kv kv;
  kv.k = Random(n * kv_dim, seed);
  kv.v = Random(n * kv_dim, seed + 1);
  kv.imp = Random(n, seed + 2);
  for (int64_t i = 0; i < n; ++i) {
    kv.pos.push_back(i);
    kv.live.push_back(static_cast<int32_t>(i));
  }
  return kv;
}

std::vector<float> AttendQ(const AttnShape& s, const CsaConfig* csa, const Kv& kv, const float* q,
                           int64_t pos) {
  SeedConfig c = TinyConfig();
  RopeParams r = MakeRopeParams(c, 64);
  AttnScratch scratch;
  std::vector<float> out(s.n_heads * s.head_dim);
  EXPECT_TRUE(csa == nullptr || csa->global_mode == "causal");  // the mode passed below
  Attend(s, r, nullptr, csa, CsaGlobal::kCausal, nullptr, kv.view(), q, pos, {}, false, out.data(),
         scratch);
  return out;
}

TEST(SeedAttention, S016_GqaEqualsDuplicatedHeads) {
  const int64_t d = 8, n = 9;
  Kv one = MakeKv(n, d, 1);  // one KV head read by two query heads
  Kv two;
  two = one;
  two.k.clear();
  two.v.clear();
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < 2; ++r) {
      two.k.insert(two.k.end(), one.k.begin() + i * d, one.k.begin() + (i + 1) * d);
      two.v.insert(two.v.end(), one.v.begin() + i * d, one.v.begin() + (i + 1) * d);
    }
  }
  std::vector<float> q = Random(2 * d, 7);
  EXPECT_EQ(AttendQ({2, 1, d}, nullptr, one, q.data(), 8),
            AttendQ({2, 2, d}, nullptr, two, q.data(), 8));
}

TEST(SeedAttention, S017_LocalWindowIgnoresOlderKeys) {
  const int64_t d = 8, n = 12;
  CsaConfig csa;
  csa.enabled = true;
  csa.local_window = 3;
  csa.branch_weights = {1.0, 0.0, 0.0};
  Kv kv = MakeKv(n, d, 2);
  std::vector<float> q = Random(d, 3);
  auto base = AttendQ({1, 1, d}, &csa, kv, q.data(), 10);
  Kv far = kv;
  far.v[7 * d] += 5.0f;  // j = 7 < i - 2
  EXPECT_EQ(AttendQ({1, 1, d}, &csa, far, q.data(), 10), base);
  Kv near = kv;
  near.v[9 * d] += 5.0f;  // j = 9 inside [8, 10]
  EXPECT_NE(AttendQ({1, 1, d}, &csa, near, q.data(), 10), base);
  Kv future = kv;
  future.v[11 * d] += 5.0f;  // never read
  EXPECT_EQ(AttendQ({1, 1, d}, &csa, future, q.data(), 10), base);
}

TEST(SeedAttention, S018_SegmentWindowCoversShortSequencesFully) {
  const int64_t d = 8, n = 6;
  CsaConfig csa;
  csa.enabled = true;
  csa.segment_window = 6;
  csa.branch_weights = {0.0, 1.0, 0.0};
  Kv kv = MakeKv(n, d, 4);
  std::vector<float> q = Random(d, 5);
  for (int64_t i = 0; i < n; ++i) {
    auto a = AttendQ({1, 1, d}, &csa, kv, q.data(), i),
         b = AttendQ({1, 1, d}, nullptr, kv, q.data(), i);
    for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(a[c], b[c], 1e-6);
  }
  Kv longer = MakeKv(10, d, 4);
  Kv old = longer;
  old.v[2 * d] += 3.0f;  // j = 2 < 9 - 5
  EXPECT_EQ(AttendQ({1, 1, d}, &csa, longer, q.data(), 9),
            AttendQ({1, 1, d}, &csa, old, q.data(), 9));
}

TEST(SeedAttention, S019_GlobalSelectsEverythingWhenShort) {
  const int64_t d = 8, n = 5;
  CsaConfig csa;
  csa.enabled = true;
  csa.global_topk = 1024;
  csa.branch_weights = {0.0, 0.0, 1.0};
  Kv kv = MakeKv(n, d, 6);
  std::vector<float> q = Random(d, 7);
  auto a = AttendQ({1, 1, d}, &csa, kv, q.data(), 4),
       b = AttendQ({1, 1, d}, nullptr, kv, q.data(), 4);
  for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(a[c], b[c], 1e-6);
  // Top-K by importance, ties to the lower position, returned in position order.
  std::vector<float> imp = {0.5f, 0.9f, 0.5f, 0.1f, 0.9f};
  std::vector<int64_t> pos = {0, 1, 2, 3, 4};
  std::vector<int32_t> cand = {0, 1, 2, 3, 4};
  EXPECT_EQ(SelectByImportance(cand, imp.data(), pos.data(), 3), (std::vector<int32_t>{0, 1, 4}));
}

TEST(SeedAttention, S020_IdenticalBranchesFuseToTheSameTensor) {
  const int64_t d = 8, n = 7;
  CsaConfig csa;
  csa.enabled = true;  // windows and K cover everything: the three branches agree
  Kv kv = MakeKv(n, d, 8);
  std::vector<float> q = Random(2 * d, 9);
  auto a = AttendQ({2, 1, d}, &csa, kv, q.data(), 6),
       b = AttendQ({2, 1, d}, nullptr, kv, q.data(), 6);
  for (size_t c = 0; c < a.size(); ++c) EXPECT_NEAR(a[c], b[c], 1e-6);
}

// ---------------------------------------------------------------- HCA

TEST(SeedHca, S031_StatisticsAreFiniteForOneToken) {
  std::vector<float> g = {1.0f, -2.0f};
  std::vector<double> mu, sigma;
  FeatureStats(g.data(), 1, 2, 1e-6, mu, sigma);
  EXPECT_EQ(mu[0], 1.0);
  EXPECT_NEAR(sigma[1], std::sqrt(1e-6), 1e-12);
  std::vector<float> rows = Random(5 * 3, 12);
  FeatureStats(rows.data(), 5, 3, 1e-6, mu, sigma);
  for (int c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (int t = 0; t < 5; ++t) m += rows[t * 3 + c] / 5.0;
    for (int t = 0; t < 5; ++t) v += (rows[t * 3 + c] - m) * (rows[t * 3 + c] - m) / 5.0;
    EXPECT_NEAR(mu[c], m, 1e-6);
    EXPECT_NEAR(sigma[c], std::sqrt(v + 1e-6), 1e-6);  // population std, + eps
  }
}

TEST(SeedHca, S032_ZeroControllerGivesHalfGate) {
  const int64_t H = 4, hid = 3, T = 2;
  std::vector<float> fc1(hid * 3 * H, 0.0f), fc2(H * hid, 0.0f);
  HcaWeights w{
      TensorView::Contiguous(fc1.data(), DType::kF32, {hid, 3 * H}), std::vector<float>(hid, 0.0f),
      TensorView::Contiguous(fc2.data(), DType::kF32, {H, hid}), std::vector<float>(H, 0.0f)};
  std::vector<float> g = Random(T * H, 13), out(T * H), wm(T);
  std::vector<double> mu(H, 0.3), sigma(H, 1.2);
  ThreadPool pool(1);
  HcaGate(pool, w, g.data(), T, H, mu, sigma, out.data(), wm.data());
  for (int64_t i = 0; i < T * H; ++i) EXPECT_FLOAT_EQ(out[i], g[i] / 2);
  EXPECT_FLOAT_EQ(wm[0], 0.5f);
}

TEST(SeedHca, S032_GateIsInsideZeroOne) {
  const int64_t H = 4, hid = 3, T = 3;
  std::vector<float> fc1 = Random(hid * 3 * H, 14, 3.0f), fc2 = Random(H * hid, 15, 3.0f);
  HcaWeights w{
      TensorView::Contiguous(fc1.data(), DType::kF32, {hid, 3 * H}), std::vector<float>(hid, 0.1f),
      TensorView::Contiguous(fc2.data(), DType::kF32, {H, hid}), std::vector<float>(H, -0.1f)};
  std::vector<float> g = Random(T * H, 16), out(T * H), wm(T);
  std::vector<double> mu, sigma;
  FeatureStats(g.data(), T, H, 1e-6, mu, sigma);
  ThreadPool pool(1);
  HcaGate(pool, w, g.data(), T, H, mu, sigma, out.data(), wm.data());
  for (int64_t i = 0; i < T * H; ++i) {
    if (g[i] != 0) {
      const float ratio = out[i] / g[i];
      EXPECT_GT(ratio, 0.0f);
      EXPECT_LT(ratio, 1.0f);
    }
  }
}

// ---------------------------------------------------------------- CED MLP and layout

struct CedCase {
  int64_t I, H;
  std::vector<float> fused_rowmajor, down, bias;
};

CedCase MakeCed(int64_t I, int64_t H, uint32_t seed) {
  return {I, H, Random(I * H, seed, 0.3f), Random(H * I, seed + 1, 0.3f),
          Random(I, seed + 2, 0.1f)};
}

TEST(SeedCed, S037_S038_FusedEqualsExplicitAndFoldedHalfWidth) {
  ThreadPool pool(2);
  for (int64_t I : {8, 130}) {  // I/2 = 65: not a multiple of 64
    const int64_t H = 12, T = 3;
    CedCase k = MakeCed(I, H, static_cast<uint32_t>(I));
    CedMlpWeights w{TensorView::Contiguous(k.fused_rowmajor.data(), DType::kF32, {I, H}), k.bias,
                    TensorView::Contiguous(k.down.data(), DType::kF32, {H, I})};
    std::vector<float> x = Random(T * H, 21), a(T * H), b(T * H), c(T * H);
    CedScratch s;
    CedMlpForward(pool, w, x.data(), T, a.data(), s);
    CedMlpExplicit(w, x.data(), T, b.data());
    // Folded: half-width SwiGLU with down'[:, j] = down[:, 2j] + down[:, 2j+1].
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        double acc = 0;
        for (int64_t j = 0; j < I / 2; ++j) {
          double gj = k.bias[j], uj = k.bias[I / 2 + j];
          for (int64_t q = 0; q < H; ++q) {
            gj += k.fused_rowmajor[j * H + q] * x[t * H + q];
            uj += k.fused_rowmajor[(I / 2 + j) * H + q] * x[t * H + q];
          }
          acc +=
              gj / (1 + std::exp(-gj)) * uj * (k.down[h * I + 2 * j] + k.down[h * I + 2 * j + 1]);
        }
        c[t * H + h] = static_cast<float>(acc);
      }
    }
    for (int64_t i = 0; i < T * H; ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-5);
      EXPECT_NEAR(a[i], c[i], 1e-5);
    }
  }
}

TEST(SeedCed, S039_FusedPathHoldsNoExpandedTensors) {
  ThreadPool pool(1);
  const int64_t I = 16, H = 8, T = 5;
  CedCase k = MakeCed(I, H, 30);
  CedMlpWeights w{TensorView::Contiguous(k.fused_rowmajor.data(), DType::kF32, {I, H}), k.bias,
                  TensorView::Contiguous(k.down.data(), DType::kF32, {H, I})};
  std::vector<float> x = Random(T * H, 31), out(T * H);
  CedScratch s;
  CedMlpForward(pool, w, x.data(), T, out.data(), s);
  EXPECT_LE(s.fused.size(), static_cast<size_t>(T * (I / 2) * 2));  // gate + up halves only
}

TEST(SeedCed, S074_S076_S009_ColMajorDetectedRowMajorNot) {
  const int64_t I = 14, H = 5;  // a small [I, H] stand-in for [14336, 5120]
  std::vector<float> rowmajor = Random(I * H, 40), colmajor(I * H);
  for (int64_t r = 0; r < I; ++r)
    for (int64_t c = 0; c < H; ++c) colmajor[c * I + r] = rowmajor[r * H + c];
  TensorView cm = ColMajorView(colmajor.data(), DType::kF32, I, H);
  TensorView rm = TensorView::Contiguous(rowmajor.data(), DType::kF32, {I, H});
  EXPECT_EQ(DetectLayout(cm), Layout::kColMajor);
  EXPECT_EQ(DetectLayout(rm), Layout::kRowMajor);
  EXPECT_EQ(cm.strides[0], 1);
  EXPECT_EQ(cm.strides[1], I);
  OwnedMatrix back = ToLayout(cm, Layout::kRowMajor);  // element by element identical
  EXPECT_EQ(back.data, rowmajor);
}

TEST(SeedCed, S077_RelayoutKeepsLogicalValues) {
  const int64_t I = 6, H = 4;
  std::vector<float> rowmajor = Random(I * H, 41);
  TensorView rm = TensorView::Contiguous(rowmajor.data(), DType::kF32, {I, H});
  OwnedMatrix cm = ToLayout(rm, Layout::kColMajor);
  EXPECT_EQ(DetectLayout(cm.view), Layout::kColMajor);
  EXPECT_EQ(ToLayout(cm.view, Layout::kRowMajor).data, rowmajor);
  // The matmul reads either layout in place with the same result.
  ThreadPool pool(1);
  std::vector<float> x = Random(2 * H, 42), a(2 * I), b(2 * I);
  MatMulAnyLayout(pool, a.data(), x.data(), rm, 2);
  MatMulAnyLayout(pool, b.data(), x.data(), cm.view, 2);
  for (int64_t i = 0; i < 2 * I; ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
}

TEST(SeedCed, S143_ConverterRoundTripAndFunctionPreserving) {
  const int64_t F = 6, H = 8, T = 3;
  std::vector<float> g = Random(F * H, 50, 0.3f), u = Random(F * H, 51, 0.3f),
                     dn = Random(H * F, 52, 0.3f);
  TensorView gv = TensorView::Contiguous(g.data(), DType::kF32, {F, H});
  TensorView uv = TensorView::Contiguous(u.data(), DType::kF32, {F, H});
  TensorView dv = TensorView::Contiguous(dn.data(), DType::kF32, {H, F});
  auto ced = ConvertSwiGluToCed(gv, uv, dv);
  ASSERT_TRUE(ced.ok()) << ced.status().ToString();
  EXPECT_EQ(DetectLayout(ced->fused.view), Layout::kColMajor);
  auto back = ConvertCedToSwiGlu(ced->weights());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->gate.data, g);
  EXPECT_EQ(back->up.data, u);
  EXPECT_EQ(back->down.data, dn);
  // Same function: CED fused output == standard SwiGLU.
  ThreadPool pool(1);
  std::vector<float> x = Random(T * H, 53), a(T * H), b(T * H);
  CedScratch s;
  CedMlpForward(pool, ced->weights(), x.data(), T, a.data(), s);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      double acc = 0;
      for (int64_t j = 0; j < F; ++j) {
        double gj = 0, uj = 0;
        for (int64_t q = 0; q < H; ++q) {
          gj += g[j * H + q] * x[t * H + q];
          uj += u[j * H + q] * x[t * H + q];
        }
        acc += gj / (1 + std::exp(-gj)) * uj * dn[h * F + j];
      }
      b[t * H + h] = static_cast<float>(acc);
    }
  }
  for (int64_t i = 0; i < T * H; ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
  // Bad inputs: mismatched shapes; a non-zero bias cannot go back.
  EXPECT_ERROR(ConvertSwiGluToCed(gv, uv, gv), StatusCode::kInvalidArgument, "do not fit");
  CedMlpWeights biased = ced->weights();
  biased.bias[0] = 0.5f;
  EXPECT_ERROR(ConvertCedToSwiGlu(biased), StatusCode::kInvalidArgument, "ced_bias is not zero");
}

// ---------------------------------------------------------------- router

MoeConfig Moe(int64_t E, int64_t k) {
  MoeConfig m;
  m.enabled = true;
  m.num_experts = E;
  m.num_experts_per_tok = k;
  m.capacity_factor = 0;
  return m;
}

TEST(SeedRouter, S041_S050_TopKSoftmaxSumsToOneDescending) {
  MoeConfig m = Moe(8, 3);
  std::vector<float> logits = {0.1f, 2.0f, 2.0f, -1.0f, 0.5f, 1.5f, 0.0f, 0.2f};
  RouterState st;
  RouteResult r;
  ASSERT_TRUE(Route(m, {}, st, logits.data(), 1, 1, nullptr, r).ok());
  EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 2, 5}));  // tie 1 vs 2: lower index first
  EXPECT_NEAR(r.weight[0] + r.weight[1] + r.weight[2], 1.0, 1e-6);
  EXPECT_GE(r.weight[1], r.weight[2]);
}

TEST(SeedRouter, S042_KStaysInRange) {
  MoeConfig m = Moe(16, 2);
  EXPECT_EQ(EffectiveK(m, 1), 2);
  m.dynamic_k = true;
  EXPECT_EQ(EffectiveK(m, 1), 2);  // decode S=1: k >= 1 (max(2, 0))
  EXPECT_EQ(EffectiveK(m, 1024), 15);
  EXPECT_EQ(EffectiveK(m, 32768), 16);
  m.dynamic_k = false;
  m.num_experts_per_tok = 40;
  EXPECT_EQ(EffectiveK(m, 1), 16);
}

TEST(SeedRouter, S043_GroupLimitedHandExample) {
  MoeConfig m = Moe(16, 2);
  m.routing = "group_limited";
  m.n_group = 4;
  m.topk_group = 2;
  m.per_group_k = 2;
  // group 0: 5+4=9, group 1: 8+0=8, group 2: 3+3=6, group 3: 7+6.5=13.5
  std::vector<float> lg = {5, 4, 1, 0, 8, 0, -1, -2, 3, 3, 2, 1, 7, 6.5f, 6, 0};
  auto sel = SelectExperts(m, lg.data(), nullptr, nullptr, 4);
  EXPECT_EQ(sel, (std::vector<int32_t>{12, 13, 0, 1}));  // groups 3 and 0, by descending logit
  RouterState st;
  RouteResult r;
  ASSERT_TRUE(Route(m, {}, st, lg.data(), 1, 1, nullptr, r).ok());
  EXPECT_EQ(r.k, 4);
  double s = 0;
  for (float w : r.weight) s += w;
  EXPECT_NEAR(s, 1.0, 1e-6);
}

TEST(SeedRouter, S044_CapacityArithmetic) {
  MoeConfig m = Moe(16, 2);
  m.capacity_factor = 1.0;
  RouterState st;
  RouteResult r;
  for (int64_t N : {32768, 4 * 8192}) {
    std::vector<float> lg = Random(N * 16, 60);
    ASSERT_TRUE(Route(m, {}, st, lg.data(), N, N, nullptr, r).ok());
    EXPECT_EQ(r.capacity, 4096);
    for (int64_t c : r.counts) EXPECT_LE(c, 4096);
  }
}

TEST(SeedRouter, S045_SeedGreedyOverflowAndAllFull) {
  MoeConfig m = Moe(4, 2);
  m.capacity_factor = 1.0;  // N=4, k=2, E=4: capacity 2
  m.assign = "seed_greedy";
  // Every token prefers expert 0, then expert 1.
  std::vector<float> lg;
  for (int t = 0; t < 4; ++t) lg.insert(lg.end(), {3.0f, 2.0f, 0.0f, -1.0f});
  RouterState st;
  RouteResult r;
  ASSERT_TRUE(Route(m, {}, st, lg.data(), 4, 4, nullptr, r).ok());
  EXPECT_EQ(r.capacity, 2);
  EXPECT_EQ(r.counts[0], 2);
  EXPECT_EQ(r.counts[1], 2);
  EXPECT_EQ(r.expert[0 * 2], 0);
  EXPECT_EQ(r.expert[2 * 2], 1);  // third token: expert 0 full → its 2nd choice
  // Not renormalised: the 2nd choice keeps its top-k weight.
  EXPECT_NEAR(r.weight[2 * 2], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  // Five tokens: capacity ceil(5·2/4) = 3; tokens 6.. would be all-full. Use 8 tokens, cap 4.
  std::vector<float> lg8;
  for (int t = 0; t < 8; ++t) lg8.insert(lg8.end(), {3.0f, 2.0f, 0.0f, -1.0f});
  m.capacity_factor = 0.5;  // ceil(0.5·8·2/4) = 2 → tokens 4.. find 0 and 1 full
  ASSERT_TRUE(Route(m, {}, st, lg8.data(), 8, 8, nullptr, r).ok());
  EXPECT_EQ(r.expert[4 * 2], -1);  // all k choices full: zero output
  // Same input, same assignment.
  RouteResult r2;
  ASSERT_TRUE(Route(m, {}, st, lg8.data(), 8, 8, nullptr, r2).ok());
  EXPECT_EQ(r.expert, r2.expert);
}

TEST(SeedRouter, S045_TopkCappedReroutesAndRenormalises) {
  MoeConfig m = Moe(4, 2);
  m.capacity_factor = 1.0;  // capacity 2 for 4 tokens
  std::vector<float> lg;
  for (int t = 0; t < 4; ++t) lg.insert(lg.end(), {3.0f, 2.0f, 1.0f, 0.0f});
  RouterState st;
  RouteResult r;
  ASSERT_TRUE(Route(m, {}, st, lg.data(), 4, 4, nullptr, r).ok());
  EXPECT_EQ(r.expert[2 * 2], 2);  // third token: 0 and 1 full → 2 and 3
  EXPECT_EQ(r.expert[2 * 2 + 1], 3);
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(r.weight[t * 2] + r.weight[t * 2 + 1], 1.0, 1e-6);
  for (int64_t c : r.counts) EXPECT_LE(c, 2);
}

TEST(SeedRouter, S046_CumulativeCounterIsTheSumOfSteps) {
  MoeConfig m = Moe(8, 2);
  RouterState st;
  RouteResult a, b;
  std::vector<float> lg = Random(3 * 8, 61);
  ASSERT_TRUE(Route(m, {}, st, lg.data(), 3, 3, nullptr, a).ok());
  ASSERT_TRUE(Route(m, {}, st, lg.data(), 3, 6, nullptr, b).ok());
  EXPECT_EQ(a.expert, b.expert);  // counters reset per forward
  for (int e = 0; e < 8; ++e) EXPECT_EQ(st.cumulative[e], a.counts[e] + b.counts[e]);
}

TEST(SeedRouter, S047_UniformRoutingGivesLossK) {
  MoeConfig m = Moe(2, 1);
  std::vector<float> lg = {1.0f, 0.0f, 0.0f, 1.0f};
  RouterOptions o;
  o.diagnostics = true;
  RouterState st;
  RouteResult r;
  ASSERT_TRUE(Route(m, o, st, lg.data(), 2, 2, nullptr, r).ok());
  EXPECT_NEAR(r.lb_loss, 1.0, 1e-9);
}

TEST(SeedRouter, S049_MaskAndWeightsTogetherFail) {
  MoeConfig m = Moe(4, 2);
  RouterOptions o;
  o.expert_mask = {1, 1, 1, 1};
  std::vector<float> lg = Random(4, 62), w = {0.5f, 0.5f};
  RouterState st;
  RouteResult r;
  EXPECT_ERROR(Route(m, o, st, lg.data(), 1, 1, w.data(), r), StatusCode::kInvalidArgument,
               "an expert mask and external routing weights were both given");
}

TEST(SeedRouter, S051_MaskedExpertsNeverSelectedAndKReduced) {
  MoeConfig m = Moe(4, 2);
  RouterOptions o;
  o.expert_mask = {0, 1, 0, 0};
  std::vector<float> lg = {9.0f, 1.0f, 8.0f, 7.0f};
  RouterState st;
  RouteResult r;
  ASSERT_TRUE(Route(m, o, st, lg.data(), 1, 1, nullptr, r).ok());
  EXPECT_EQ(r.k, 1);
  EXPECT_EQ(r.expert[0], 1);
  EXPECT_FLOAT_EQ(r.weight[0], 1.0f);
  o.expert_mask = {0, 0, 0, 0};
  EXPECT_ERROR(Route(m, o, st, lg.data(), 1, 1, nullptr, r), StatusCode::kInvalidArgument,
               "the expert mask allows no expert");
}

TEST(SeedRouter, S051_ForceExpertsAlwaysParticipate) {
  MoeConfig m = Moe(6, 2);
  RouterOptions o;
  o.force_experts = {4};
  // Token 0 would pick {0, 1}, token 1 {2, 4}: expert 4 is in both, the lowest-ranked
  // non-forced pick is replaced; weights are the softmax over what is used.
  std::vector<float> lg = {5.0f, 4.0f, 1.0f, 0.0f, -3.0f, -1.0f,  //
                           0.0f, 0.0f, 3.0f, 1.0f, 2.0f,  -1.0f};
  RouterState st;
  RouteResult r;
  ASSERT_TRUE(Route(m, o, st, lg.data(), 2, 2, nullptr, r).ok());
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 4, 2, 4}));
  for (int t = 0; t < 2; ++t) EXPECT_NEAR(r.weight[2 * t] + r.weight[2 * t + 1], 1.0, 1e-6);
  EXPECT_NEAR(r.weight[1], std::exp(-3.0f) / (std::exp(5.0f) + std::exp(-3.0f)), 1e-6);
  EXPECT_EQ(r.counts[4], 2);
  EXPECT_EQ(r.counts[1], 0);
}

TEST(SeedRouter, S051_ForceExpertsBadInputs) {
  MoeConfig m = Moe(4, 2);
  std::vector<float> lg = {1.0f, 2.0f, 3.0f, 4.0f};
  RouterState st;
  RouteResult r;
  RouterOptions out_of_range;
  out_of_range.force_experts = {4};
  EXPECT_EQ(Route(m, out_of_range, st, lg.data(), 1, 1, nullptr, r).code(),
            StatusCode::kInvalidArgument);
  RouterOptions too_many;
  too_many.force_experts = {0, 1, 2};
  EXPECT_ERROR(Route(m, too_many, st, lg.data(), 1, 1, nullptr, r), StatusCode::kInvalidArgument,
               "3 forced experts for k = 2");
  RouterOptions masked_out;
  masked_out.expert_mask = {1, 0, 1, 1};
  masked_out.force_experts = {1};
  EXPECT_ERROR(Route(m, masked_out, st, lg.data(), 1, 1, nullptr, r), StatusCode::kInvalidArgument,
               "forced expert 1 is not allowed by the expert mask");
}

// Identity experts: out = Σ_j w_j · x, with Σ_j w_j = 1 → out = x, row by row.
TEST(SeedRouter, S048_DispatchCombineIsTheIdentityOnTokenPositionsUnderPermutation) {
  const int64_t N = 9, H = 5, E = 4;
  MoeConfig m = Moe(E, 2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(N * H), lg(N * E);
  for (float& v : x) v = nd(rng);
  for (float& v : lg) v = nd(rng);
  auto identity = [&](int32_t, const float* in, int64_t n, float* o) { std::copy_n(in, n * H, o); };
  std::vector<int64_t> perm(N);
  std::iota(perm.begin(), perm.end(), 0);
  DispatchScratch scratch;
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<float> px(N * H), plg(N * E), out(N * H, -7.0f);
    for (int64_t i = 0; i < N; ++i) {
      std::copy_n(x.data() + perm[i] * H, H, px.data() + i * H);
      std::copy_n(lg.data() + perm[i] * E, E, plg.data() + i * E);
    }
    RouterState st;
    RouteResult r;
    ASSERT_TRUE(Route(m, {}, st, plg.data(), N, N, nullptr, r).ok());
    DispatchCombine(r, E, px.data(), N, H, identity, out.data(), scratch);
    for (int64_t i = 0; i < N * H; ++i) ASSERT_NEAR(out[i], px[i], 1e-5) << "trial " << trial;
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  // Experts that tag their rows: each output row holds only its own token's contributions.
  RouterState st;
  RouteResult r;
  ASSERT_TRUE(Route(m, {}, st, lg.data(), N, N, nullptr, r).ok());
  auto tag = [&](int32_t e, const float* in, int64_t n, float* o) {
    for (int64_t i = 0; i < n * H; ++i) o[i] = in[i] * static_cast<float>(e + 1);
  };
  std::vector<float> out(N * H);
  DispatchCombine(r, E, x.data(), N, H, tag, out.data(), scratch);
  for (int64_t t = 0; t < N; ++t) {
    float scale = 0;
    for (int64_t j = 0; j < r.k; ++j) scale += r.weight[t * r.k + j] * (r.expert[t * r.k + j] + 1);
    for (int64_t h = 0; h < H; ++h) EXPECT_NEAR(out[t * H + h], scale * x[t * H + h], 1e-5);
  }
}

TEST(SeedCed, S078_ViewsPastTheStorageAreRefused) {
  // The seed's CEDLoader: as_strided([14336, 5120], (14336, 1)) on a 73,400,320-element
  // storage reaches element 205,511,679 (C-03). No data is touched, so null is fine.
  const int64_t R = 14336, C = 5120;
  auto bad = CheckedStridedView(nullptr, R * C, DType::kBF16, R, C, R, 1, "gate_proj.weight");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(bad.status().ToString().find("205511679"), std::string::npos);
  EXPECT_NE(bad.status().ToString().find("gate_proj.weight"), std::string::npos);
  auto good = CheckedStridedView(nullptr, R * C, DType::kBF16, R, C, 1, R, "gate_proj.weight");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(DetectLayout(*good), Layout::kColMajor);
  // Off by one element: the last offset must be < storage.
  EXPECT_FALSE(CheckedStridedView(nullptr, R * C - 1, DType::kF32, R, C, 1, R, "w").ok());
  EXPECT_EQ(CheckedStridedView(nullptr, 10, DType::kF32, 2, 2, -1, 1, "w").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckedStridedView(nullptr, 0, DType::kF32, 0, 5, 5, 1, "w").ok());
}

TEST(SeedRouter, S052_ExternalWeightsValidated) {
  std::vector<float> neg = {-0.1f, 1.1f}, close = {0.5f, 0.5000001f}, small = {0.2f, 0.2f};
  EXPECT_ERROR(ValidateExternalWeights(neg), StatusCode::kInvalidArgument,
               "is negative or not finite");
  EXPECT_TRUE(ValidateExternalWeights(close).ok());
  EXPECT_NEAR(close[0] + close[1], 1.0, 1e-7);
  EXPECT_ERROR(ValidateExternalWeights(small), StatusCode::kInvalidArgument,
               "sum to 0.400000, not 1");
  std::vector<float> nan = {NAN, 1.0f};
  EXPECT_ERROR(ValidateExternalWeights(nan), StatusCode::kInvalidArgument,
               "= nan is negative or not finite");
}

TEST(SeedRouter, S053_VarianceAndReweighting) {
  MoeConfig m = Moe(16, 2);
  RouterOptions o;
  o.reweight = true;
  RouterState st;
  RouteResult r;
  // Uniform: token t prefers experts 2t and 2t+1.
  std::vector<float> lg(8 * 16, 0.0f);
  for (int t = 0; t < 8; ++t) {
    lg[t * 16 + 2 * t] = 2.0f;
    lg[t * 16 + 2 * t + 1] = 1.0f;
  }
  ASSERT_TRUE(Route(m, o, st, lg.data(), 8, 8, nullptr, r).ok());
  EXPECT_NEAR(r.utilization_variance, 0.0, 1e-12);
  EXPECT_EQ(st.reweight_count, 0);
  // Every token on experts 0 and 1.
  std::vector<float> skew(8 * 16, 0.0f);
  for (int t = 0; t < 8; ++t) {
    skew[t * 16 + 0] = 2.0f;
    skew[t * 16 + 1] = 1.0f;
  }
  ASSERT_TRUE(Route(m, o, st, skew.data(), 8, 8, nullptr, r).ok());
  EXPECT_NEAR(r.utilization_variance, 0.109375, 1e-9);
  EXPECT_EQ(st.reweight_count, 1);
  EXPECT_LT(st.bias[0], 0.0f);
  EXPECT_GT(st.bias[5], 0.0f);
}

TEST(SeedRouter, S054_ExpertDropoutIsNotPartOfInference) {
  // Inference has no expert dropout: the same input routes the same way every time.
  MoeConfig m = Moe(8, 2);
  std::vector<float> lg = Random(4 * 8, 63);
  RouterState s1, s2;
  RouteResult a, b;
  ASSERT_TRUE(Route(m, {}, s1, lg.data(), 4, 4, nullptr, a).ok());
  ASSERT_TRUE(Route(m, {}, s2, lg.data(), 4, 4, nullptr, b).ok());
  EXPECT_EQ(a.expert, b.expert);
  EXPECT_EQ(a.weight, b.weight);
}

// ---------------------------------------------------------------- TaskAdapter

TEST(SeedTaskAdapter, S056_S057_ParamsAndLayerRange) {
  const int64_t L = 3, H = 8, r = 4, F = 6;
  EXPECT_EQ(TaskAdapterParams(L, H, r, F), L * r + r * H + r + 2 * r * r + r + F * r + F);
  std::vector<float> le = Random(L * r, 70), te = Random(r * H, 71), m0 = Random(r * 2 * r, 72),
                     m2 = Random(F * r, 73);
  TaskAdapterWeights w{TensorView::Contiguous(le.data(), DType::kF32, {L, r}),
                       TensorView::Contiguous(te.data(), DType::kF32, {r, H}),
                       std::vector<float>(r, 0.0f),
                       TensorView::Contiguous(m0.data(), DType::kF32, {r, 2 * r}),
                       std::vector<float>(r, 0.0f),
                       TensorView::Contiguous(m2.data(), DType::kF32, {F, r}),
                       std::vector<float>(F, 0.0f)};
  ThreadPool pool(1);
  std::vector<float> t = Random(H, 74);
  auto ok = TaskAdapterOut(pool, w, t.data(), 2);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(static_cast<int64_t>(ok->size()), F);
  auto bad = TaskAdapterOut(pool, w, t.data(), 3);
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_ERROR(TaskAdapterOut(pool, w, t.data(), -1), StatusCode::kOutOfRange,
               "layer_id -1 is outside [0, 2]");
}

// ---------------------------------------------------------------- KV pruner

KvPrunerConfig Pruner() {
  KvPrunerConfig c;
  c.enabled = true;
  return c;
}

TEST(SeedPruner, S060_Threshold) {
  KvPrunerConfig c = Pruner();
  EXPECT_DOUBLE_EQ(PrunerTau(c, 0), 0.35);
  EXPECT_DOUBLE_EQ(PrunerTau(c, 1), 0.525);
  EXPECT_DOUBLE_EQ(PrunerTau(c, 1e9), 0.6);
}

TEST(SeedPruner, S061_S062_DecisionAndUsageRatio) {
  KvPrunerConfig c = Pruner();
  c.protect_recent = 0;
  c.protect_sink = 0;
  // r = live / (budget · eff): 0.45 pruned when the cache is full, kept when empty.
  EXPECT_LT(0.45, PrunerTau(c, 1.0));
  EXPECT_GE(0.45, PrunerTau(c, 0.0));
  EXPECT_LT(0.30, PrunerTau(c, 0.0));
  KvPrunerPolicy full(c, 4);
  std::vector<int64_t> pos = {0, 1, 2, 3};
  std::vector<float> score = {0.45f, 0.9f, 0.30f, 0.8f};
  auto d = full.Step(pos, score, 4);
  EXPECT_NEAR(d.r, 1.0 / 0.85, 1e-12);  // current = max
  EXPECT_EQ(d.evict, (std::vector<int64_t>{0, 2}));
  KvPrunerPolicy empty(c, 1000);
  auto e = empty.Step(pos, score, 4);
  EXPECT_EQ(e.evict, (std::vector<int64_t>{2}));  // 0.30 pruned at any r, 0.45 kept
}

TEST(SeedPruner, S059_ScoresInZeroOne) {
  const int64_t H = 6, hid = 5, T = 7;
  std::vector<float> fc1 = Random(hid * H, 80, 2.0f), fc2 = Random(hid, 81, 2.0f);
  PrunerWeights w{TensorView::Contiguous(fc1.data(), DType::kF32, {hid, H}),
                  std::vector<float>(hid, 0.1f),
                  TensorView::Contiguous(fc2.data(), DType::kF32, {1, hid}), 0.4f};
  ThreadPool pool(1);
  std::vector<float> h = Random(T * H, 82, 3.0f), s(T);
  PrunerScores(pool, w, h.data(), T, H, s.data());
  for (float x : s) {
    EXPECT_GE(x, 0.0f);
    EXPECT_LE(x, 1.0f);
  }
  const float pooled = PooledScore(pool, w, h.data(), T, H);
  EXPECT_GE(pooled, 0.0f);
  EXPECT_LE(pooled, 1.0f);
}

TEST(SeedPruner, S063_HighScoresNeverExceedTheBudgetAndLowestGoFirst) {
  KvPrunerConfig c = Pruner();
  c.protect_recent = 2;
  c.protect_sink = 1;
  const int64_t budget = 6;
  KvPrunerPolicy p(c, budget);
  std::vector<int64_t> pos;
  std::vector<float> score;
  std::mt19937 g(5);
  std::uniform_real_distribution<float> high(0.7f, 1.0f);
  for (int64_t t = 0; t < 40; ++t) {
    pos.push_back(t);
    score.push_back(high(g));
    auto d = p.Step(pos, score, t + 1);
    // Every evicted token scored no higher than any surviving unprotected one.
    float max_evicted = -1;
    for (int64_t e : d.evict) {
      const size_t i = std::find(pos.begin(), pos.end(), e) - pos.begin();
      max_evicted = std::max(max_evicted, score[i]);
      pos.erase(pos.begin() + static_cast<std::ptrdiff_t>(i));
      score.erase(score.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (size_t i = 0; i < pos.size(); ++i) {
      if (!p.Protected(pos[i], t + 1) && max_evicted >= 0) {
        EXPECT_GE(score[i], max_evicted);
      }
    }
    EXPECT_LE(static_cast<int64_t>(pos.size()), budget);
    EXPECT_GE(p.efficiency(), 0.75);
    EXPECT_LE(p.efficiency(), 0.95);
  }
  EXPECT_TRUE(std::find(pos.begin(), pos.end(), 0) != pos.end());  // the sink survives
}

TEST(SeedPruner, S063_EfficiencyDirection) {
  KvPrunerConfig c = Pruner();
  c.protect_recent = 0;
  c.protect_sink = 0;
  KvPrunerPolicy p(c, 10);
  std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> high(10, 0.99f);
  p.Step(pos, high, 10);  // no pruning under pressure (r = 1/0.85): eff falls → more pruning
  EXPECT_NEAR(p.efficiency(), 0.85 * 0.98, 1e-12);
  std::vector<float> low(10, 0.1f);
  p.Step(pos, low, 10);  // pruned: eff rises
  EXPECT_NEAR(p.efficiency(), 0.85 * 0.98 * 1.02, 1e-12);
  c.eff_mode = "seed";
  KvPrunerPolicy s(c, 10);
  s.Step(pos, high, 10);
  EXPECT_NEAR(s.efficiency(), 0.85 * 1.02, 1e-12);  // the article's literal direction
}

}  // namespace
}  // namespace dsv4::seed
