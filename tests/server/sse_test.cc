// SSE framing (server/sse.h) and the /metrics page (server/metrics.h).
#include "server/sse.h"

#include <gtest/gtest.h>

#include "server/metrics.h"

namespace dsv4::server {
namespace {

TEST(Sse, DataOnly) { EXPECT_EQ(SseEvent("{\"a\":1}"), "data: {\"a\":1}\n\n"); }

TEST(Sse, NamedEvent) {
  EXPECT_EQ(SseEvent("{}", "message_start"), "event: message_start\ndata: {}\n\n");
}

TEST(Sse, MultiLineDataBecomesSeveralDataFields) {
  EXPECT_EQ(SseEvent("a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
}

TEST(Sse, EmptyData) { EXPECT_EQ(SseEvent(""), "data: \n\n"); }

TEST(Sse, CommentHasNoLineBreaks) { EXPECT_EQ(SseComment("a\nb"), ": a b\n\n"); }

TEST(Sse, RoundTripThroughParser) {
  const std::string stream = SseEvent("one") + SseComment("ping") + SseEvent("two\nlines", "x") +
                             SseEvent("") + SseEvent("[DONE]");
  const std::vector<SseMessage> msgs = ParseSse(stream);
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[0].data, "one");
  EXPECT_EQ(msgs[0].event, "");
  EXPECT_EQ(msgs[1].event, "x");
  EXPECT_EQ(msgs[1].data, "two\nlines");
  EXPECT_EQ(msgs[2].data, "");
  EXPECT_EQ(msgs[3].data, "[DONE]");
}

TEST(Sse, ParserDropsUnterminatedEvent) {
  const std::vector<SseMessage> msgs = ParseSse("data: a\n\ndata: b\n");
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].data, "a");
}

TEST(Sse, ParserHandlesCrLfAndNoSpace) {
  const std::vector<SseMessage> msgs = ParseSse("event:e\r\ndata:x\r\n\r\n");
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].event, "e");
  EXPECT_EQ(msgs[0].data, "x");
}

TEST(SseDeathTest, EventNameWithLineBreak) { EXPECT_DEATH(SseEvent("x", "a\nb"), "line break"); }

TEST(Metrics, RendersCountersAndGauges) {
  RequestCounters counters;
  counters.Record("/v1/chat/completions", 200);
  counters.Record("/v1/chat/completions", 200);
  counters.Record("/v1/messages", 400);
  EngineMetrics e;
  e.running = 3;
  e.waiting = 2;
  e.kv_tokens_used = 50;
  e.kv_tokens_capacity = 200;
  e.generated_tokens_total = 7;
  const std::string page = RenderMetrics(e, counters.Snapshot());
  EXPECT_NE(page.find("dsv4_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("dsv4_requests_total{route=\"/v1/messages\",status=\"400\"} 1\n"),
            std::string::npos);
  EXPECT_NE(page.find("dsv4_running_sequences 3\n"), std::string::npos);
  EXPECT_NE(page.find("dsv4_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(page.find("dsv4_generation_tokens_total 7\n"), std::string::npos);
  EXPECT_NE(page.find("dsv4_kv_cache_usage_ratio 0.25\n"), std::string::npos);
  EXPECT_NE(page.find("# TYPE dsv4_queue_depth gauge\n"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::server
