// A server over a DeepSeek-V4.1 stand-in (the echo model reporting
// architecture "deepseek_v41"): the chat format is picked from the
// architecture, the V4.1 prompt carries the request's reasoning effort, tool
// calls in V4.1's DSML tags come back parsed, and what V4.1 serving does not
// take (images, out-of-range efforts, a forced tool call) is a 400 naming it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "base/check.h"
#include "engine/echo_model.h"
#include "engine/engine.h"
#include "server/server.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::json;

class V41Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model =
        LoadEchoModel(std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/deepseek_v4_tokenizer.json.gz",
                      4096, "deepseek_v41");
    CHECK(model.ok());
    model_ = new LoadedModel(std::move(*model));
    auto engine = Engine::Start(*model_, EngineOptions{});
    CHECK(engine.ok());
    engine_ = engine->release();
    ServerOptions options;
    options.port = 0;
    options.model_id = "echo41";
    server_ = new Server(*engine_, options);
    CHECK(server_->Bind().ok());
    thread_ = new std::thread([] { server_->Run(); });
  }
  static void TearDownTestSuite() {
    server_->Stop();
    thread_->join();
    delete thread_;
    delete server_;
    delete engine_;
    delete model_;
  }

  static httplib::Result Post(const Json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }
  static Json Chat(Json body) {
    body["model"] = "echo41";
    auto res = Post(body);
    CHECK(res);
    EXPECT_EQ(res->status, 200) << res->body;
    return Json::parse(res->body);
  }
  static Json UserSays(const std::string& text) {
    return Json::array({{{"role", "user"}, {"content", text}}});
  }

  static LoadedModel* model_;
  static Engine* engine_;
  static Server* server_;
  static std::thread* thread_;
};
LoadedModel* V41Server::model_ = nullptr;
Engine* V41Server::engine_ = nullptr;
Server* V41Server::server_ = nullptr;
std::thread* V41Server::thread_ = nullptr;

TEST_F(V41Server, ReasoningEffortReachesTheV41Prompt) {
  const std::pair<Json, std::string> cases[] = {
      {Json(33), "Effort: 33"},     {Json("low"), "Effort: 50"},    {Json("high"), "Effort: 75"},
      {Json("max"), "Effort: 100"}, {Json("none"), "Effort: none"},
  };
  for (const auto& [effort, expected] : cases) {
    Json r = Chat({{"messages", UserSays("EFFORT?")}, {"reasoning_effort", effort}});
    const Json& msg = r["choices"][0]["message"];
    EXPECT_EQ(msg["content"], expected) << effort;
    if (effort != "none") EXPECT_EQ(msg["reasoning_content"], "Thinking about it.") << effort;
  }
  // Thinking on without an effort: the default, high.
  Json r = Chat({{"messages", UserSays("EFFORT?")}, {"thinking", {{"type", "enabled"}}}});
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Effort: 75");
}

TEST_F(V41Server, ToolCallsInV41TagsComeBackParsed) {
  const Json tools = Json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"parameters",
           {{"type", "object"}, {"properties", {{"location", {{"type", "string"}}}}}}}}}}});
  Json r = Chat({{"messages", UserSays(R"(CALL get_weather {"location": "Paris", "days": 3})")},
                 {"tools", tools}});
  const Json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.dump();
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.dump();
  const Json& fn = choice["message"]["tool_calls"][0]["function"];
  EXPECT_EQ(fn["name"], "get_weather");
  EXPECT_EQ(Json::parse(fn["arguments"].get<std::string>()),
            Json::parse(R"({"location": "Paris", "days": 3})"));
}

TEST_F(V41Server, UnsupportedInputIsA400NamingIt) {
  struct Case {
    Json body;
    std::string needle;
  };
  const Case cases[] = {
      {{{"messages", UserSays("x")}, {"reasoning_effort", 101}}, "reasoning_effort"},
      {{{"messages", UserSays("x")}, {"reasoning_effort", "extreme"}}, "reasoning_effort"},
      {{{"messages",
         Json::array(
             {{{"role", "user"},
               {"content", Json::array({{{"type", "image_url"},
                                         {"image_url", {{"url", "http://x/y.png"}}}}})}}})}},
       "messages[0].content[0].type"},
  };
  for (const Case& c : cases) {
    Json body = c.body;
    body["model"] = "echo41";
    auto res = Post(body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body.dump() << " -> " << res->body;
    EXPECT_NE(res->body.find(c.needle), std::string::npos) << res->body;
  }
}

}  // namespace
}  // namespace dsv4::server
