// Pieces shared by the DeepSeek-V4 (chat_dsv4.cc) and DeepSeek-V4.1
// (chat_dsv41.cc) chat encoders: the reference encoders share their message
// preprocessing (merge_tool_messages, sort_tool_results_by_call_order) and
// JSON conventions. Internal to src/tokenizer; not an API.
#ifndef DSV4_TOKENIZER_CHAT_DSV4_INTERNAL_H_
#define DSV4_TOKENIZER_CHAT_DSV4_INTERNAL_H_

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4::chat_internal {

using Json = nlohmann::ordered_json;

inline constexpr std::string_view kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// Quick-instruction task -> its token.
const std::map<std::string, std::string, std::less<>>& TaskTokens();
// Python truthiness of a JSON value (None, False, 0, "", [], {} are false).
bool Truthy(const Json& v);
// msg.get(key): nullptr when absent.
const Json* Get(const Json& msg, std::string_view key);
// A text field: absent or null -> "", a string -> itself, else an error
// naming `where` and the key.
Result<std::string> TextField(const Json& msg, std::string_view key, std::string_view where);

// tools_from_openai_format: [tool["function"] for tool in tools], validated.
Result<std::vector<const Json*>> ToolFunctions(const Json& tools, std::string_view where);

struct ToolCall {
  std::string name;
  Json arguments;  // the "arguments" value as given (normally a JSON string)
};
// tool_calls_from_openai_format, validated.
Result<std::vector<ToolCall>> ToolCalls(const Json& calls, std::string_view where);

// merge_tool_messages: "tool" messages become tool_result blocks of a user
// message; consecutive user messages merge; user text becomes a text block.
Result<std::vector<Json>> MergeToolMessages(const Json& messages);
// sort_tool_results_by_call_order.
void SortToolResultsByCallOrder(std::vector<Json>* messages);

// The path of the first string (or key) with ill-formed UTF-8 under `v`.
std::optional<std::string> FindInvalidUtf8(const Json& v, const std::string& path);
// The messages of a request (an array, or {"messages", "tools"} with the tools
// attached to a leading system / developer message, one inserted if needed).
Result<Json> MessagesOf(const Json& request);
// JSON text -> ordered JSON; errors name the byte offset.
Result<Json> ParseRequestJson(std::string_view request_json);

}  // namespace dsv4::chat_internal

#endif  // DSV4_TOKENIZER_CHAT_DSV4_INTERNAL_H_
