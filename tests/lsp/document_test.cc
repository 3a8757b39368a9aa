// UTF-16 positions and document edits (lsp/document.h).
#include "lsp/document.h"

#include <gtest/gtest.h>

namespace dsv4::lsp {
namespace {

TEST(OffsetOf, Ascii) {
  const std::string text = "abc\ndef";
  EXPECT_EQ(OffsetOf(text, {0, 0}), 0u);
  EXPECT_EQ(OffsetOf(text, {0, 2}), 2u);
  EXPECT_EQ(OffsetOf(text, {1, 0}), 4u);
  EXPECT_EQ(OffsetOf(text, {1, 3}), 7u);
}

TEST(OffsetOf, Utf16Units) {
  // a (1 byte, 1 unit), é (2 bytes, 1 unit), 😀 (4 bytes, 2 units: a surrogate pair), b.
  const std::string text = "aé😀b";
  EXPECT_EQ(OffsetOf(text, {0, 1}), 1u);
  EXPECT_EQ(OffsetOf(text, {0, 2}), 3u);
  EXPECT_EQ(OffsetOf(text, {0, 3}), 3u);  // inside the pair: the character's start
  EXPECT_EQ(OffsetOf(text, {0, 4}), 7u);
  EXPECT_EQ(OffsetOf(text, {0, 5}), 8u);
  const std::string cjk = "中文x";  // 3 bytes, 1 unit each
  EXPECT_EQ(OffsetOf(cjk, {0, 2}), 6u);
}

TEST(OffsetOf, ClampsPastLineAndTextEnd) {
  const std::string text = "ab\ncd";
  EXPECT_EQ(OffsetOf(text, {0, 99}), 2u);  // the line's end, before its break
  EXPECT_EQ(OffsetOf(text, {7, 0}), 5u);   // past the last line: the text's end
  EXPECT_EQ(OffsetOf(text, {1, 99}), 5u);
  EXPECT_EQ(OffsetOf("", {0, 5}), 0u);
}

TEST(OffsetOf, LineBreakKinds) {
  const std::string text = "a\r\nb\rc\nd";
  EXPECT_EQ(OffsetOf(text, {1, 0}), 3u);
  EXPECT_EQ(OffsetOf(text, {2, 0}), 5u);
  EXPECT_EQ(OffsetOf(text, {3, 0}), 7u);
  EXPECT_EQ(OffsetOf(text, {0, 5}), 1u);  // before "\r\n"
}

TEST(OffsetOf, BrokenUtf8CountsEachByte) {
  const std::string text = "\xe4\xb8x\xff";  // a truncated 3-byte sequence, x, a stray byte
  EXPECT_EQ(OffsetOf(text, {0, 1}), 1u);
  EXPECT_EQ(OffsetOf(text, {0, 2}), 2u);
  EXPECT_EQ(OffsetOf(text, {0, 4}), 4u);
}

TEST(ApplyChange, IncrementalEdits) {
  std::string text = "hello\nworld";
  ASSERT_TRUE(ApplyChange(text, {true, {0, 5}, {0, 5}, ", there"}).ok());
  EXPECT_EQ(text, "hello, there\nworld");
  ASSERT_TRUE(ApplyChange(text, {true, {0, 5}, {1, 0}, " "}).ok());  // across a line break
  EXPECT_EQ(text, "hello world");
  ASSERT_TRUE(ApplyChange(text, {true, {0, 0}, {0, 6}, ""}).ok());  // deletion
  EXPECT_EQ(text, "world");
  ASSERT_TRUE(ApplyChange(text, {false, {}, {}, "new"}).ok());  // full text
  EXPECT_EQ(text, "new");
}

TEST(ApplyChange, PositionsAfterAnEmojiAreUtf16) {
  std::string text = "x = \"😀\"";
  // The closing quote is at UTF-16 character 7 (x, space, =, space, ", 2 units, ").
  ASSERT_TRUE(ApplyChange(text, {true, {0, 7}, {0, 7}, "!"}).ok());
  EXPECT_EQ(text, "x = \"😀!\"");
}

TEST(ApplyChange, ReversedRangeIsInvalid) {
  std::string text = "abc";
  const Status st = ApplyChange(text, {true, {0, 2}, {0, 1}, "x"});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("before it starts"), std::string::npos) << st.message();
  EXPECT_EQ(text, "abc");
}

TEST(DocumentStore, ChangesApplyInOrderAndBadOnesLeaveTheText) {
  DocumentStore store;
  store.Open("file:///a", "one\ntwo", 1);
  ASSERT_TRUE(
      store.Change("file:///a", 2, {{true, {1, 0}, {1, 3}, "2"}, {true, {0, 0}, {0, 3}, "1"}})
          .ok());
  EXPECT_EQ(store.Find("file:///a")->text, "1\n2");
  EXPECT_EQ(store.Find("file:///a")->version, 2);
  // The second change is bad: neither is applied.
  EXPECT_EQ(store.Change("file:///a", 3, {{true, {0, 0}, {0, 1}, "x"}, {true, {0, 1}, {0, 0}, ""}})
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Find("file:///a")->text, "1\n2");
  EXPECT_EQ(store.Change("file:///b", 1, {}).code(), StatusCode::kNotFound);
  store.Close("file:///a");
  EXPECT_EQ(store.Find("file:///a"), nullptr);
}

}  // namespace
}  // namespace dsv4::lsp
