// The chat page routes (web_page.h).
#include "server/web_page.h"

#include <cctype>

namespace dsv4::server {
namespace {

constexpr const char* kIndex = "index.html";

// The page loads its own script and style and talks to this server only.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string EscapeRegex(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// True when an If-None-Match header value names `etag` (a list, or "*").
bool EtagMatches(std::string_view if_none_match, std::string_view etag) {
  while (!if_none_match.empty() && if_none_match.front() == ' ') if_none_match.remove_prefix(1);
  while (!if_none_match.empty() && if_none_match.back() == ' ') if_none_match.remove_suffix(1);
  if (if_none_match == "*") return true;
  size_t at = 0;
  while ((at = if_none_match.find(etag, at)) != std::string_view::npos) {
    const bool open = at > 0 && if_none_match[at - 1] == '"';
    const size_t end = at + etag.size();
    if (open && end < if_none_match.size() && if_none_match[end] == '"') return true;
    at = end;
  }
  return false;
}

void Serve(const WebAsset& asset, const httplib::Request& req, httplib::Response& res) {
  const std::string etag = std::string("\"") + asset.etag + "\"";
  res.set_header("ETag", etag);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  if (EtagMatches(req.get_header_value("If-None-Match"), asset.etag)) {
    res.status = 304;
    return;
  }
  res.set_content(reinterpret_cast<const char*>(asset.data), asset.size,
                  WebContentType(asset.path));
}

}  // namespace

const WebAsset* FindWebAsset(std::string_view url_path) {
  if (url_path.empty() || url_path.front() != '/') return nullptr;
  std::string_view name = url_path.substr(1);
  if (name.empty()) name = kIndex;
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    if (name == kWebAssets[i].path) return &kWebAssets[i];
  }
  return nullptr;
}

std::string WebContentType(std::string_view file_name) {
  const size_t dot = file_name.rfind('.');
  const std::string_view ext = dot == std::string_view::npos ? "" : file_name.substr(dot + 1);
  if (ext == "html") return "text/html; charset=utf-8";
  if (ext == "css") return "text/css; charset=utf-8";
  if (ext == "js") return "text/javascript; charset=utf-8";
  if (ext == "svg") return "image/svg+xml";
  if (ext == "png") return "image/png";
  if (ext == "ico") return "image/x-icon";
  if (ext == "json") return "application/json";
  return "application/octet-stream";
}

bool IsWebPagePath(std::string_view url_path) { return FindWebAsset(url_path) != nullptr; }

bool IsSameOrigin(std::string_view origin, std::string_view host) {
  if (host.empty()) return false;
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string o = lower(origin);
  const std::string h = lower(host);
  return o == "http://" + h || o == "https://" + h;
}

void RegisterWebPage(httplib::Server& http) {
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    const WebAsset& asset = kWebAssets[i];
    auto handler = [&asset](const httplib::Request& req, httplib::Response& res) {
      Serve(asset, req, res);
    };
    std::string pattern = "/";
    pattern += EscapeRegex(asset.path);
    http.Get(pattern, handler);
    if (std::string_view(asset.path) == kIndex) http.Get("/", handler);
  }
}

}  // namespace dsv4::server
