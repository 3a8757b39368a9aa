// The chat page's files (web/ in the repository), embedded into the binary at
// build time: cmake/embed_files.cmake writes the table into a generated
// source, so an installed `dsv4 serve` needs no files beside it.
//
// Not here: serving them (web_page.h).
#ifndef DSV4_SERVER_WEB_ASSETS_H_
#define DSV4_SERVER_WEB_ASSETS_H_

#include <cstddef>

namespace dsv4::server {

struct WebAsset {
  const char* path;  // relative to web/, e.g. "index.html"
  const unsigned char* data;
  size_t size;
  const char* etag;  // the first 16 hex digits of the file's SHA-256
};

extern const WebAsset kWebAssets[];
extern const size_t kWebAssetCount;

}  // namespace dsv4::server

#endif  // DSV4_SERVER_WEB_ASSETS_H_
