// The chat page of `dsv4 serve`: GET / answers web/index.html, GET /NAME the
// other files of web/ (embedded, web_assets.h), each with its Content-Type,
// an ETag (If-None-Match answers 304), `Cache-Control: no-cache` (browsers
// revalidate, so a new binary's page is seen at once) and a
// Content-Security-Policy that lets the page load and fetch from this server
// only. The page is plain data with no secret in it, so it needs no API key (a
// browser cannot send one when it opens a URL; the page sends the key the user
// enters with every API request); the Host and Origin rules apply to it as to
// every route (server.cc's pre-routing handler). Unknown paths stay 404.
//
// Not here: the page itself (web/), the API it calls (server.cc).
#ifndef DSV4_SERVER_WEB_PAGE_H_
#define DSV4_SERVER_WEB_PAGE_H_

#include <httplib.h>

#include <string>
#include <string_view>

#include "server/web_assets.h"

namespace dsv4::server {

// The embedded file served at `url_path` ("/" is index.html), or nullptr.
const WebAsset* FindWebAsset(std::string_view url_path);

// The Content-Type for a file name, from its extension.
std::string WebContentType(std::string_view file_name);

// True for the paths the page is served at (they need no API key).
bool IsWebPagePath(std::string_view url_path);

// True when `origin` (an Origin header) names the server the request reached
// (`host`, its Host header): browsers send Origin with the page's own POSTs,
// which are then no cross-origin request.
bool IsSameOrigin(std::string_view origin, std::string_view host);

// Registers GET routes for every embedded file.
void RegisterWebPage(httplib::Server& http);

}  // namespace dsv4::server

#endif  // DSV4_SERVER_WEB_PAGE_H_
