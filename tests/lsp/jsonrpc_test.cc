// The LSP base protocol's framing and JSON-RPC message checks (lsp/jsonrpc.h),
// good input and every kind of bad input.
#include "lsp/jsonrpc.h"

#include <gtest/gtest.h>

#include <string>

namespace dsv4::lsp {
namespace {

using R = FrameDecoder::Result;

TEST(FrameDecoder, TwoFramesInOneFeed) {
  FrameDecoder d;
  d.Feed(EncodeFrame("{\"a\":1}") + EncodeFrame("[]"));
  std::string body, error;
  ASSERT_EQ(d.Next(&body, &error), R::kFrame);
  EXPECT_EQ(body, "{\"a\":1}");
  ASSERT_EQ(d.Next(&body, &error), R::kFrame);
  EXPECT_EQ(body, "[]");
  EXPECT_EQ(d.Next(&body, &error), R::kNeedMore);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameDecoder, ByteByByte) {
  const std::string stream = EncodeFrame("hello") + EncodeFrame("é");
  FrameDecoder d;
  std::vector<std::string> bodies;
  std::string body, error;
  for (char c : stream) {
    d.Feed(std::string_view(&c, 1));
    for (R r; (r = d.Next(&body, &error)) != R::kNeedMore;) {
      ASSERT_EQ(r, R::kFrame) << error;
      bodies.push_back(body);
    }
  }
  EXPECT_EQ(bodies, (std::vector<std::string>{"hello", "é"}));
}

TEST(FrameDecoder, OtherHeadersAndCaseAreAccepted) {
  FrameDecoder d;
  d.Feed(
      "content-length:  3 \r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\nabc");
  std::string body, error;
  ASSERT_EQ(d.Next(&body, &error), R::kFrame) << error;
  EXPECT_EQ(body, "abc");
}

TEST(FrameDecoder, MissingLengthIsAnErrorAndDecodingGoesOn) {
  FrameDecoder d;
  d.Feed("Content-Type: x\r\n\r\n" + EncodeFrame("ok"));
  std::string body, error;
  ASSERT_EQ(d.Next(&body, &error), R::kError);
  EXPECT_NE(error.find("no Content-Length"), std::string::npos) << error;
  ASSERT_EQ(d.Next(&body, &error), R::kFrame);
  EXPECT_EQ(body, "ok");
}

TEST(FrameDecoder, BadLengthsAreErrors) {
  for (const char* header : {"Content-Length: -1", "Content-Length: 12x", "Content-Length:",
                             "Content-Length: 99999999999999999999999", "garbage line"}) {
    FrameDecoder d;
    d.Feed(std::string(header) + "\r\n\r\n" + EncodeFrame("ok"));
    std::string body, error;
    ASSERT_EQ(d.Next(&body, &error), R::kError) << header;
    EXPECT_FALSE(error.empty());
    ASSERT_EQ(d.Next(&body, &error), R::kFrame) << header;
    EXPECT_EQ(body, "ok");
  }
}

TEST(FrameDecoder, DuplicateLengthIsAnError) {
  FrameDecoder d;
  d.Feed("Content-Length: 2\r\nContent-Length: 2\r\n\r\nokxx");
  std::string body, error;
  ASSERT_EQ(d.Next(&body, &error), R::kError);
  EXPECT_NE(error.find("two Content-Length"), std::string::npos) << error;
}

TEST(FrameDecoder, OversizedBodyIsSkipped) {
  FrameDecoder d;
  const size_t n = kMaxFrameBytes + 1;
  d.Feed("Content-Length: " + std::to_string(n) + "\r\n\r\n");
  std::string body, error;
  ASSERT_EQ(d.Next(&body, &error), R::kError);
  EXPECT_NE(error.find("at most"), std::string::npos) << error;
  d.Feed(std::string(n, 'x'));
  d.Feed(EncodeFrame("next"));
  ASSERT_EQ(d.Next(&body, &error), R::kFrame);
  EXPECT_EQ(body, "next");
}

TEST(FrameDecoder, EndlessHeaderIsAnError) {
  FrameDecoder d;
  d.Feed(std::string(kMaxHeaderBytes + 10, 'h'));
  std::string body, error;
  ASSERT_EQ(d.Next(&body, &error), R::kError);
  EXPECT_NE(error.find("without an empty line"), std::string::npos) << error;
  EXPECT_EQ(d.buffered(), 0u);
  d.Feed(EncodeFrame("again"));
  ASSERT_EQ(d.Next(&body, &error), R::kFrame);
  EXPECT_EQ(body, "again");
}

TEST(FrameDecoder, IncompleteBodyWaits) {
  FrameDecoder d;
  d.Feed("Content-Length: 5\r\n\r\nab");
  std::string body, error;
  EXPECT_EQ(d.Next(&body, &error), R::kNeedMore);
  d.Feed("cde");
  ASSERT_EQ(d.Next(&body, &error), R::kFrame);
  EXPECT_EQ(body, "abcde");
}

Message Parse(const std::string& body) {
  Message m;
  MessageError e;
  EXPECT_TRUE(ParseMessage(body, &m, &e)) << body << ": " << e.message;
  return m;
}

MessageError ParseFails(const std::string& body) {
  Message m;
  MessageError e;
  EXPECT_FALSE(ParseMessage(body, &m, &e)) << body;
  return e;
}

TEST(ParseMessage, Kinds) {
  Message r = Parse(R"({"jsonrpc":"2.0","id":3,"method":"initialize","params":{}})");
  EXPECT_EQ(r.kind, Message::Kind::kRequest);
  EXPECT_EQ(r.id, 3);
  EXPECT_EQ(r.method, "initialize");
  Message s = Parse(R"({"jsonrpc":"2.0","id":"x","method":"m","params":[1]})");
  EXPECT_EQ(s.id, "x");
  EXPECT_TRUE(s.params.is_array());
  Message n = Parse(R"({"jsonrpc":"2.0","method":"initialized"})");
  EXPECT_EQ(n.kind, Message::Kind::kNotification);
  EXPECT_TRUE(n.params.is_null());
  Message resp = Parse(R"({"jsonrpc":"2.0","id":1,"result":null})");
  EXPECT_EQ(resp.kind, Message::Kind::kResponse);
}

TEST(ParseMessage, NotJsonIsParseError) {
  for (const char* body : {"", "{", "{\"jsonrpc\":\"2.0\",}", "nul", "\"\xff\xfe\""}) {
    const MessageError e = ParseFails(body);
    EXPECT_EQ(e.code, ErrorCode::kParseError) << body;
    EXPECT_TRUE(e.id.is_null());
  }
}

TEST(ParseMessage, NotAMessageIsInvalidRequest) {
  struct Case {
    const char* body;
    Json id;
    const char* says;
  };
  const Case cases[] = {
      {"[1,2]", nullptr, "batches"},
      {"42", nullptr, "JSON object"},
      {R"({"jsonrpc":"2.0","id":1.5,"method":"m"})", nullptr, "'id'"},
      {R"({"jsonrpc":"2.0","id":null,"method":"m"})", nullptr, "'id'"},
      {R"({"jsonrpc":"2.0","id":[1],"method":"m"})", nullptr, "'id'"},
      {R"({"id":7,"method":"m"})", 7, "'jsonrpc'"},
      {R"({"jsonrpc":"1.0","id":7,"method":"m"})", 7, "'jsonrpc'"},
      {R"({"jsonrpc":"2.0","id":7,"method":5})", 7, "'method'"},
      {R"({"jsonrpc":"2.0","id":"a","method":"m","params":"x"})", "a", "'params'"},
      {R"({"jsonrpc":"2.0","id":7})", 7, "'method'"},
      {R"({"jsonrpc":"2.0","result":1})", nullptr, "'method'"},
  };
  for (const Case& c : cases) {
    const MessageError e = ParseFails(c.body);
    EXPECT_EQ(e.code, ErrorCode::kInvalidRequest) << c.body;
    EXPECT_EQ(e.id, c.id) << c.body;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.body << ": " << e.message;
  }
}

TEST(ParseMessage, Replies) {
  EXPECT_EQ(MakeResult(1, nullptr).dump(), R"({"id":1,"jsonrpc":"2.0","result":null})");
  const Json e = MakeError("x", ErrorCode::kRequestCancelled, "gone");
  EXPECT_EQ(e["error"]["code"], -32800);
  EXPECT_EQ(e["error"]["message"], "gone");
  EXPECT_EQ(e["id"], "x");
}

}  // namespace
}  // namespace dsv4::lsp
