// HCA gating controller (see hca.h).
#include "model/seed/hca.h"

#include <algorithm>
#include <cmath>

#include "ops/matmul.h"

namespace dsv4::seed {

void FeatureStats(const float* rows, int64_t n, int64_t H, double eps, std::vector<double>& mu,
                  std::vector<double>& sigma) {
  mu.assign(H, 0.0);
  sigma.assign(H, 0.0);
  if (n == 0) return;
  // Welford, one feature at a time, in row order.
  for (int64_t c = 0; c < H; ++c) {
    double mean = 0, m2 = 0;
    for (int64_t t = 0; t < n; ++t) {
      const double x = rows[t * H + c];
      const double delta = x - mean;
      mean += delta / static_cast<double>(t + 1);
      m2 += delta * (x - mean);
    }
    mu[c] = mean;
    sigma[c] = std::sqrt(m2 / static_cast<double>(n) + eps);
  }
}

void PrefixFeatureStats(const float* rows, int64_t n0, int64_t T, int64_t H, double eps,
                        std::vector<double>& mu, std::vector<double>& sigma) {
  mu.resize(static_cast<size_t>(T * H));
  sigma.resize(static_cast<size_t>(T * H));
  // The Welford recurrence of FeatureStats, emitting the running values at each new row.
  for (int64_t c = 0; c < H; ++c) {
    double mean = 0, m2 = 0;
    for (int64_t t = 0; t < n0 + T; ++t) {
      const double x = rows[t * H + c];
      const double delta = x - mean;
      mean += delta / static_cast<double>(t + 1);
      m2 += delta * (x - mean);
      if (t >= n0) {
        mu[(t - n0) * H + c] = mean;
        sigma[(t - n0) * H + c] = std::sqrt(m2 / static_cast<double>(t + 1) + eps);
      }
    }
  }
}

float Gelu(float x) {
  return static_cast<float>(0.5 * x * (1.0 + std::erf(static_cast<double>(x) / std::sqrt(2.0))));
}

void HcaGate(ThreadPool& pool, const HcaWeights& w, const float* g, int64_t T, int64_t H,
             const std::vector<double>& mu, const std::vector<double>& sigma, float* g_hca,
             float* w_mean) {
  MlpScratch local;
  HcaGate(pool, w, g, T, H, mu, sigma, g_hca, w_mean, local);
}

namespace {

// mu, sigma hold one row of H shared by every token (stats_stride 0) or one per
// token (stats_stride H).
void HcaGateImpl(ThreadPool& pool, const HcaWeights& w, const float* g, int64_t T, int64_t H,
                 const double* mu, const double* sigma, int64_t stats_stride, float* g_hca,
                 float* w_mean, MlpScratch& s) {
  const int64_t hid = w.fc1.size(0);
  s.in.resize(std::max<size_t>(s.in.size(), static_cast<size_t>(T * 3 * H)));
  s.hidden.resize(std::max<size_t>(s.hidden.size(), static_cast<size_t>(T * hid)));
  s.out.resize(std::max<size_t>(s.out.size(), static_cast<size_t>(T * H)));
  float* f = s.in.data();
  float* a = s.hidden.data();
  float* z = s.out.data();
  for (int64_t t = 0; t < T; ++t) {
    float* ft = f + t * 3 * H;
    for (int64_t c = 0; c < H; ++c) {
      ft[c] = g[t * H + c];
      ft[H + c] = static_cast<float>(mu[t * stats_stride + c]);
      ft[2 * H + c] = static_cast<float>(sigma[t * stats_stride + c]);
    }
  }
  ops::MatMul(pool, a, f, w.fc1, T);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < hid; ++j) a[t * hid + j] = Gelu(a[t * hid + j] + w.fc1_b[j]);
  }
  ops::MatMul(pool, z, a, w.fc2, T);
  for (int64_t t = 0; t < T; ++t) {
    double sum = 0;
    for (int64_t c = 0; c < H; ++c) {
      const double zz = static_cast<double>(z[t * H + c]) + w.fc2_b[c];
      const double wc = 1.0 / (1.0 + std::exp(-zz));
      sum += wc;
      g_hca[t * H + c] = static_cast<float>(g[t * H + c] * wc);
    }
    if (w_mean != nullptr) w_mean[t] = static_cast<float>(sum / static_cast<double>(H));
  }
}

}  // namespace

void HcaGate(ThreadPool& pool, const HcaWeights& w, const float* g, int64_t T, int64_t H,
             const std::vector<double>& mu, const std::vector<double>& sigma, float* g_hca,
             float* w_mean, MlpScratch& s) {
  HcaGateImpl(pool, w, g, T, H, mu.data(), sigma.data(), 0, g_hca, w_mean, s);
}

void HcaGatePerToken(ThreadPool& pool, const HcaWeights& w, const float* g, int64_t T, int64_t H,
                     const std::vector<double>& mu, const std::vector<double>& sigma, float* g_hca,
                     float* w_mean, MlpScratch& s) {
  CHECK(static_cast<int64_t>(mu.size()) >= T * H && static_cast<int64_t>(sigma.size()) >= T * H);
  HcaGateImpl(pool, w, g, T, H, mu.data(), sigma.data(), H, g_hca, w_mean, s);
}

}  // namespace dsv4::seed
