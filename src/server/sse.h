// Server-sent events framing (https://html.spec.whatwg.org/multipage/server-sent-events.html):
// what the streaming endpoints write. An event is optional "event: NAME",
// one "data: " line per line of the payload (a payload with newlines stays
// one event), and a blank line. Comments (": text") keep idle streams alive
// and probe whether the client is still there. Used by server.cc.
#ifndef DSV4_SERVER_SSE_H_
#define DSV4_SERVER_SSE_H_

#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server {

// One event. `data` may hold "\n", "\r\n" or "\r" line breaks; each line
// becomes its own data: field. `event` must not contain line breaks (CHECKed).
std::string SseEvent(std::string_view data, std::string_view event = {});
// A comment line (line breaks in `text` become spaces).
std::string SseComment(std::string_view text);

// A parsed event, for tests and clients.
struct SseMessage {
  std::string event;  // "" when the event had no event: field
  std::string data;   // data lines joined by "\n"
};

// Parses a complete SSE stream: events end at a blank line; comments and
// unknown fields are skipped; a final event without its blank line is dropped
// (as the spec says).
std::vector<SseMessage> ParseSse(std::string_view stream);

}  // namespace dsv4::server

#endif  // DSV4_SERVER_SSE_H_
