// The chat page route (server/web_page.h): the embedded files equal web/ in
// the repository, and a live server answers them with their Content-Type and
// ETag, without the API key, under the Host and Origin rules, while the API's
// routes stay as they were.
#include "server/web_page.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "base/check.h"
#include "engine/echo_model.h"
#include "engine/engine.h"
#include "server/server.h"

namespace dsv4::server {
namespace {

namespace fs = std::filesystem;

const fs::path kWebDir = fs::path(DSV4_SOURCE_DIR) / "web";
constexpr const char* kKey = "sekret";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(WebAssets, EmbeddedBytesEqualTheRepositoryFiles) {
  std::set<std::string> on_disk;
  for (const auto& entry : fs::directory_iterator(kWebDir)) {
    if (entry.is_regular_file()) on_disk.insert(entry.path().filename().string());
  }
  std::set<std::string> embedded;
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    const WebAsset& a = kWebAssets[i];
    embedded.insert(a.path);
    const std::string file = ReadFile(kWebDir / a.path);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(a.data), a.size), file) << a.path;
  }
  EXPECT_EQ(embedded, on_disk);
  EXPECT_TRUE(embedded.count("index.html"));
  EXPECT_TRUE(embedded.count("chat.js"));
  EXPECT_TRUE(embedded.count("chat.css"));
}

TEST(WebAssets, EtagsAreDistinctHexDigests) {
  std::set<std::string> etags;
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    const std::string etag = kWebAssets[i].etag;
    EXPECT_EQ(etag.size(), 16u);
    EXPECT_TRUE(std::all_of(etag.begin(), etag.end(), [](char c) { return std::isxdigit(c); }));
    etags.insert(etag);
  }
  EXPECT_EQ(etags.size(), kWebAssetCount);
}

TEST(WebPage, PathsAndContentTypes) {
  ASSERT_NE(FindWebAsset("/"), nullptr);
  EXPECT_STREQ(FindWebAsset("/")->path, "index.html");
  EXPECT_EQ(FindWebAsset("/index.html"), FindWebAsset("/"));
  EXPECT_EQ(FindWebAsset("/nope.js"), nullptr);
  EXPECT_EQ(FindWebAsset("/web/index.html"), nullptr);
  EXPECT_EQ(FindWebAsset("/../web/index.html"), nullptr);
  EXPECT_EQ(FindWebAsset("index.html"), nullptr);
  EXPECT_FALSE(IsWebPagePath("/health"));
  EXPECT_FALSE(IsWebPagePath("/v1/models"));
  EXPECT_EQ(WebContentType("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(WebContentType("chat.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(WebContentType("chat.css"), "text/css; charset=utf-8");
  EXPECT_EQ(WebContentType("blob"), "application/octet-stream");
}

TEST(WebPage, SameOrigin) {
  EXPECT_TRUE(IsSameOrigin("http://127.0.0.1:8080", "127.0.0.1:8080"));
  EXPECT_TRUE(IsSameOrigin("HTTP://LocalHost:8080", "localhost:8080"));
  EXPECT_TRUE(IsSameOrigin("https://box.lan", "box.lan"));
  EXPECT_FALSE(IsSameOrigin("http://127.0.0.1:8081", "127.0.0.1:8080"));
  EXPECT_FALSE(IsSameOrigin("http://evil.example", "127.0.0.1:8080"));
  EXPECT_FALSE(IsSameOrigin("null", ""));
  EXPECT_FALSE(IsSameOrigin("http://", ""));
}

// A `dsv4 serve` over the scripted echo model, on an ephemeral port.
class LiveServer {
 public:
  explicit LiveServer(const ServerOptions& base) {
    auto model =
        LoadEchoModel(std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/deepseek_v4_tokenizer.json.gz");
    CHECK(model.ok());
    model_ = std::move(*model);
    auto engine = Engine::Start(model_, EngineOptions{});
    CHECK(engine.ok());
    engine_ = std::move(*engine);
    ServerOptions options = base;
    options.port = 0;
    options.model_id = "echo";
    server_ = std::make_unique<Server>(*engine_, options);
    CHECK(server_->Bind().ok());
    thread_ = std::thread([this] { server_->Run(); });
  }
  ~LiveServer() {
    server_->Stop();
    thread_.join();
  }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    return c;
  }
  std::string Origin() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

 private:
  LoadedModel model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

class WebPageHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerOptions options;
    options.api_key = kKey;
    server_ = new LiveServer(options);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static LiveServer* server_;
};
LiveServer* WebPageHttp::server_ = nullptr;

TEST_F(WebPageHttp, IndexIsServedWithoutTheKey) {
  auto res = server_->Client().Get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(res->body, ReadFile(kWebDir / "index.html"));
  EXPECT_EQ(res->get_header_value("ETag"), "\"" + std::string(FindWebAsset("/")->etag) + "\"");
  EXPECT_EQ(res->get_header_value("Cache-Control"), "no-cache");
  EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_NE(res->get_header_value("Content-Security-Policy").find("connect-src 'self'"),
            std::string::npos);
  auto same = server_->Client().Get("/index.html");
  ASSERT_TRUE(same);
  EXPECT_EQ(same->status, 200);
  EXPECT_EQ(same->body, res->body);
}

TEST_F(WebPageHttp, ScriptAndStyleHaveTheirTypes) {
  auto js = server_->Client().Get("/chat.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js->body, ReadFile(kWebDir / "chat.js"));
  auto css = server_->Client().Get("/chat.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->status, 200);
  EXPECT_EQ(css->get_header_value("Content-Type"), "text/css; charset=utf-8");
  EXPECT_EQ(css->body, ReadFile(kWebDir / "chat.css"));
}

TEST_F(WebPageHttp, MatchingEtagIsNotModified) {
  const std::string etag = "\"" + std::string(FindWebAsset("/chat.js")->etag) + "\"";
  auto res = server_->Client().Get("/chat.js", {{"If-None-Match", etag}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 304);
  EXPECT_TRUE(res->body.empty());
  EXPECT_EQ(res->get_header_value("ETag"), etag);
  // In a list, weak, or "*".
  for (const std::string& value :
       {"\"0000000000000000\", " + etag, "W/" + etag, std::string("*")}) {
    auto listed = server_->Client().Get("/chat.js", {{"If-None-Match", value}});
    ASSERT_TRUE(listed);
    EXPECT_EQ(listed->status, 304) << value;
  }
  // Another file's ETag does not match.
  auto other = server_->Client().Get(
      "/chat.js", {{"If-None-Match", "\"" + std::string(FindWebAsset("/")->etag) + "\""}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
}

TEST_F(WebPageHttp, HeadAnswersWithoutBody) {
  auto res = server_->Client().Head("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(res->body.empty());
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
}

TEST_F(WebPageHttp, UnknownStaticPathsAre404) {
  for (const char* path : {"/nope.js", "/web/index.html", "/index.htm", "/chat.js/x",
                           "/..%2FCMakeLists.txt", "/%2e%2e/CMakeLists.txt"}) {
    auto res = server_->Client().Get(path, {{"Authorization", std::string("Bearer ") + kKey}});
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_NE(res->body.find("Unknown route GET"), std::string::npos) << path << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json") << path;
  }
}

TEST_F(WebPageHttp, ApiStillNeedsTheKey) {
  auto res = server_->Client().Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_NE(res->body.find("invalid_api_key"), std::string::npos);
  // An unknown path is no page path: without the key it is 401, not 404.
  auto unknown = server_->Client().Get("/nope.js");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 401);
  auto ok = server_->Client().Get("/v1/models", {{"Authorization", std::string("Bearer ") + kKey}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_NE(ok->body.find("\"echo\""), std::string::npos);
  auto health = server_->Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, R"({"status":"ok"})");
  auto metrics = server_->Client().Get("/metrics", {{"x-api-key", kKey}});
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("dsv4_"), std::string::npos);
}

TEST_F(WebPageHttp, ForeignHostIsRefused) {
  auto res = server_->Client().Get("/", {{"Host", "evil.example:8080"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_NE(res->body.find("host_not_allowed"), std::string::npos);
  auto js = server_->Client().Get("/chat.js", {{"Host", "evil.example"}});
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 403);
}

TEST_F(WebPageHttp, ForeignOriginIsRefusedOwnOriginPasses) {
  const std::string body =
      R"({"model": "echo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})";
  const httplib::Headers key = {{"Authorization", std::string("Bearer ") + kKey}};
  httplib::Headers foreign = key;
  foreign.emplace("Origin", "http://evil.example");
  auto refused = server_->Client().Post("/v1/chat/completions", foreign, body, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  EXPECT_NE(refused->body.find("origin_not_allowed"), std::string::npos);
  // The page's own POST: Origin names the Host it reached.
  httplib::Headers own = key;
  own.emplace("Origin", server_->Origin());
  auto ok = server_->Client().Post("/v1/chat/completions", own, body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_NE(ok->body.find("Echo: hi"), std::string::npos);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "");
  // Same origin still needs the key.
  auto no_key = server_->Client().Post("/v1/chat/completions", {{"Origin", server_->Origin()}},
                                       body, "application/json");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
}

// With --allowed-hosts '*' any Host passes, so an Origin equal to the Host
// proves nothing (a DNS-rebinding page's is too): cross-origin rules apply.
TEST(WebPageAnyHost, SameOriginNeedsANamedHost) {
  ServerOptions options;
  options.allowed_hosts = {"*"};
  LiveServer server(options);
  auto page = server.Client().Get("/", {{"Host", "rebind.example:9"}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  auto res = server.Client().Post(
      "/v1/chat/completions", {{"Host", "rebind.example:9"}, {"Origin", "http://rebind.example:9"}},
      R"({"model": "echo", "messages": []})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_NE(res->body.find("origin_not_allowed"), std::string::npos);
  // A loopback Host is named: its own origin passes (then the request is
  // validated: 400 for the empty messages).
  auto own = server.Client().Post("/v1/chat/completions", {{"Origin", server.Origin()}},
                                  R"({"model": "echo", "messages": []})", "application/json");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 400) << own->body;
}

}  // namespace
}  // namespace dsv4::server
