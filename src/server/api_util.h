// What every API front end of the server (server.cc, ollama_api.cc,
// responses_api.cc, request.cc) shares: JSON text, random ids and seeds, the
// HTTP status of a Status, and a JSON object's optional members.
#ifndef DSV4_SERVER_API_UTIL_H_
#define DSV4_SERVER_API_UTIL_H_

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4::server {

// JSON text; strings that are not UTF-8 (never expected: the stream decoder
// sanitizes) are repaired rather than thrown on.
std::string Dump(const nlohmann::ordered_json& j);

// `prefix` + `n` random letters and digits (response, call and message ids).
std::string RandomId(std::string_view prefix, size_t n = 24);

// A random sampling seed (requests without one).
uint64_t RandomSeed();

// 400 for bad input (InvalidArgument, OutOfRange, Unimplemented), 404
// NotFound, 503 ResourceExhausted (full), else 500.
int HttpStatusOf(const Status& s);

// The member `key` of `obj` when present and not null, else nullptr.
const nlohmann::ordered_json* Field(const nlohmann::ordered_json& obj, const char* key);

}  // namespace dsv4::server

#endif  // DSV4_SERVER_API_UTIL_H_
