// Tests of tensor/tensor.h: TensorView's contiguous strides, numel, slicing
// along dim 0 (operator[] and Slice, including byte offsets of block dtypes),
// is_contiguous, ShapeString and SameShape; Tensor's 64-byte aligned, zeroed,
// contiguous storage.
#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace dsv4 {
namespace {

const uint8_t* Bytes(const TensorView& v) { return static_cast<const uint8_t*>(v.data); }

TEST(TensorViewTest, ContiguousStridesOutermostFirst) {
  std::vector<float> buf(2 * 3 * 4 * 5);
  const TensorView v = TensorView::Contiguous(buf.data(), DType::kF32, {2, 3, 4, 5});
  EXPECT_EQ(v.rank, 4);
  EXPECT_EQ(v.data, buf.data());
  EXPECT_EQ(v.sizes[0], 2);
  EXPECT_EQ(v.size(3), 5);
  EXPECT_EQ(v.strides[0], 60);
  EXPECT_EQ(v.strides[1], 20);
  EXPECT_EQ(v.strides[2], 5);
  EXPECT_EQ(v.strides[3], 1);
  EXPECT_EQ(v.numel(), 120);
  EXPECT_EQ(v.nbytes(), 480);
  EXPECT_TRUE(v.is_contiguous());

  const int64_t sizes[2] = {7, 9};
  const TensorView w =
      TensorView::Contiguous(buf.data(), DType::kBF16, std::span<const int64_t>(sizes));
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.strides[0], 9);
  EXPECT_EQ(w.strides[1], 1);
  EXPECT_EQ(w.nbytes(), 7 * 9 * 2);
}

TEST(TensorViewTest, RankZeroIsAScalar) {
  float x = 0;
  const TensorView v = TensorView::Contiguous(&x, DType::kF32, {});
  EXPECT_EQ(v.rank, 0);
  EXPECT_EQ(v.numel(), 1);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.ShapeString(), "[] f32");
}

TEST(TensorViewTest, IndexDropsDimAndOffsetsData) {
  std::vector<float> buf(4 * 6);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i);
  const TensorView v = TensorView::Contiguous(buf.data(), DType::kF32, {4, 6});
  const TensorView row = v[2];
  EXPECT_EQ(row.rank, 1);
  EXPECT_EQ(row.sizes[0], 6);
  EXPECT_EQ(row.strides[0], 1);
  EXPECT_EQ(row.As<float>()[0], 12.0f);
  EXPECT_EQ(row.As<float>()[5], 17.0f);
  EXPECT_TRUE(row.is_contiguous());
  const TensorView elem = row[4];
  EXPECT_EQ(elem.rank, 0);
  EXPECT_EQ(*elem.As<float>(), 16.0f);
}

TEST(TensorViewTest, SliceKeepsRankAndStrides) {
  std::vector<int32_t> buf(5 * 3);
  const TensorView v = TensorView::Contiguous(buf.data(), DType::kI32, {5, 3});
  const TensorView s = v.Slice(1, 4);
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.sizes[0], 3);
  EXPECT_EQ(s.sizes[1], 3);
  EXPECT_EQ(s.strides[0], 3);
  EXPECT_EQ(Bytes(s) - Bytes(v), 1 * 3 * 4);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.numel(), 9);
  const TensorView empty = v.Slice(5, 5);
  EXPECT_EQ(empty.sizes[0], 0);
  EXPECT_EQ(empty.numel(), 0);
}

TEST(TensorViewTest, BlockDTypeRowOffsetsInBytes) {
  // fp4: 2 elements per byte, so row r of [4, 64] starts at r * 32 bytes.
  std::vector<uint8_t> fp4(4 * 32);
  const TensorView a = TensorView::Contiguous(fp4.data(), DType::kFp4E2m1, {4, 64});
  EXPECT_EQ(a.nbytes(), 128);
  EXPECT_EQ(Bytes(a[3]) - Bytes(a), 96);
  EXPECT_EQ(Bytes(a.Slice(1, 3)) - Bytes(a), 32);
  // q8_0: [3, 96] is 3 blocks of 34 bytes per row.
  std::vector<uint8_t> q8(3 * 3 * 34);
  const TensorView q = TensorView::Contiguous(q8.data(), DType::kQ8_0, {3, 96});
  EXPECT_EQ(q.nbytes(), 3 * 3 * 34);
  EXPECT_EQ(Bytes(q[2]) - Bytes(q), 2 * 3 * 34);
}

TEST(TensorViewTest, IsContiguousDetectsStrides) {
  std::vector<float> buf(64);
  TensorView v = TensorView::Contiguous(buf.data(), DType::kF32, {4, 8});
  // A transposed view [8, 4] over the same storage.
  TensorView t = v;
  std::swap(t.sizes[0], t.sizes[1]);
  std::swap(t.strides[0], t.strides[1]);
  EXPECT_FALSE(t.is_contiguous());
  // Every other row: stride 16 over rows of 8.
  TensorView every_other = v;
  every_other.sizes[0] = 2;
  every_other.strides[0] = 16;
  EXPECT_FALSE(every_other.is_contiguous());
  // A size-1 dimension's stride does not matter.
  TensorView one = TensorView::Contiguous(buf.data(), DType::kF32, {1, 8});
  one.strides[0] = 12345;
  EXPECT_TRUE(one.is_contiguous());
  // A column of a [4, 8] view is strided.
  TensorView col = t[0];
  EXPECT_EQ(col.sizes[0], 4);
  EXPECT_EQ(col.strides[0], 8);
  EXPECT_FALSE(col.is_contiguous());
}

TEST(TensorViewTest, ShapeStringAndSameShape) {
  std::vector<float> buf(256);
  const TensorView v = TensorView::Contiguous(buf.data(), DType::kF32, {4, 64});
  EXPECT_EQ(v.ShapeString(), "[4, 64] f32");
  EXPECT_EQ(TensorView::Contiguous(buf.data(), DType::kBF16, {2, 3, 4}).ShapeString(),
            "[2, 3, 4] bf16");
  EXPECT_EQ(TensorView::Contiguous(buf.data(), DType::kQ8_0, {32}).ShapeString(), "[32] q8_0");
  EXPECT_TRUE(v.SameShape({4, 64}));
  EXPECT_FALSE(v.SameShape({64, 4}));
  EXPECT_FALSE(v.SameShape({4}));
  EXPECT_FALSE(v.SameShape({4, 64, 1}));
}

TEST(TensorTest, AlignedZeroedAndContiguous) {
  const std::vector<std::vector<int64_t>> shapes = {{1},       {3},          {7, 5},
                                                    {2, 3, 5}, {1, 1, 1, 1}, {33, 17}};
  for (DType t : {DType::kF32, DType::kBF16, DType::kI8, DType::kI64}) {
    for (const auto& shape : shapes) {
      Tensor x(t, std::span<const int64_t>(shape));
      const TensorView& v = x.view();
      ASSERT_NE(v.data, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 64, 0u) << v.ShapeString();
      EXPECT_TRUE(v.is_contiguous());
      EXPECT_EQ(v.dtype, t);
      EXPECT_EQ(v.rank, static_cast<int>(shape.size()));
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      EXPECT_EQ(x.numel(), n);
      EXPECT_EQ(x.data<void>(), v.data);
      const uint8_t* p = x.data<uint8_t>();
      for (int64_t i = 0; i < v.nbytes(); ++i)
        ASSERT_EQ(p[i], 0) << v.ShapeString() << " byte " << i;
    }
  }
}

TEST(TensorTest, BlockDTypesAndWritableStorage) {
  Tensor q(DType::kQ8_0, {2, 64});
  EXPECT_EQ(q.view().nbytes(), 2 * 2 * 34);
  Tensor f(DType::kFp4E2m1, {3, 32});
  EXPECT_EQ(f.view().nbytes(), 48);
  Tensor x(DType::kF32, {16, 16});
  for (int i = 0; i < 256; ++i) x.data<float>()[i] = static_cast<float>(i);
  EXPECT_EQ(x.view()[15].As<float>()[15], 255.0f);
}

TEST(TensorTest, EmptyAndMoved) {
  Tensor zero(DType::kF32, {0, 8});
  EXPECT_EQ(zero.numel(), 0);
  EXPECT_NE(zero.view().data, nullptr);
  Tensor a(DType::kF32, {4});
  void* p = a.view().data;
  Tensor b = std::move(a);
  EXPECT_EQ(b.view().data, p);
  EXPECT_EQ(b.numel(), 4);
  Tensor def;
  EXPECT_EQ(def.view().data, nullptr);
}

}  // namespace
}  // namespace dsv4
