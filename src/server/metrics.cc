// /metrics rendering (metrics.h).
#include "server/metrics.h"

#include <fmt/core.h>

namespace dsv4::server {

void RequestCounters::Record(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{route, status}];
}

std::map<std::pair<std::string, int>, int64_t> RequestCounters::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

namespace {

// Label values escape backslash, double quote and newline.
std::string EscapeLabel(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void Metric(std::string* out, const char* name, const char* type, const char* help, double value) {
  *out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
}

}  // namespace

std::string RenderMetrics(const EngineMetrics& e,
                          const std::map<std::pair<std::string, int>, int64_t>& requests,
                          const HttpMetrics& http) {
  std::string out;
  out += "# HELP dsv4_requests_total HTTP requests by route and status code.\n";
  out += "# TYPE dsv4_requests_total counter\n";
  for (const auto& [key, n] : requests) {
    out += fmt::format("dsv4_requests_total{{route=\"{}\",status=\"{}\"}} {}\n",
                       EscapeLabel(key.first), key.second, n);
  }
  Metric(&out, "dsv4_prompt_tokens_total", "counter", "Prompt tokens admitted.",
         static_cast<double>(e.prompt_tokens_total));
  Metric(&out, "dsv4_prompt_tokens_cached_total", "counter",
         "Prompt tokens reused from a slot's previous sequence (not prefilled).",
         static_cast<double>(e.prompt_tokens_cached_total));
  Metric(&out, "dsv4_prefix_hits_total", "counter",
         "Sequences that reused a cached prompt prefix (a slot's or a saved state).",
         static_cast<double>(e.prefix_hits_total));
  Metric(&out, "dsv4_kv_disk_hits_total", "counter",
         "Saved prompt states loaded from --kv-cache-dir.",
         static_cast<double>(e.disk_state_hits_total));
  Metric(&out, "dsv4_kv_disk_tokens_total", "counter",
         "Prompt tokens the saved states loaded from --kv-cache-dir held.",
         static_cast<double>(e.disk_state_tokens_total));
  Metric(&out, "dsv4_kv_disk_read_bytes_total", "counter", "Bytes read from --kv-cache-dir.",
         static_cast<double>(e.disk_state_read_bytes_total));
  Metric(&out, "dsv4_kv_disk_writes_total", "counter", "Prompt states written to --kv-cache-dir.",
         static_cast<double>(e.disk_state_writes_total));
  Metric(&out, "dsv4_kv_disk_write_bytes_total", "counter", "Bytes written to --kv-cache-dir.",
         static_cast<double>(e.disk_state_write_bytes_total));
  Metric(&out, "dsv4_kv_disk_files", "gauge", "Saved prompt states of this model on disk.",
         static_cast<double>(e.disk_state_files));
  Metric(&out, "dsv4_kv_disk_bytes", "gauge", "Bytes of saved prompt states on disk.",
         static_cast<double>(e.disk_state_bytes));
  Metric(&out, "dsv4_generation_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(e.generated_tokens_total));
  Metric(&out, "dsv4_sequences_finished_total", "counter", "Sequences that ended (any reason).",
         static_cast<double>(e.sequences_finished_total));
  Metric(&out, "dsv4_sequences_cancelled_total", "counter",
         "Sequences cancelled (client disconnected or request dropped).",
         static_cast<double>(e.sequences_cancelled_total));
  Metric(&out, "dsv4_engine_steps_total", "counter", "Engine steps run.",
         static_cast<double>(e.steps_total));
  Metric(&out, "dsv4_speculative_drafted_tokens_total", "counter",
         "Draft tokens verified by speculative decoding (--speculative).",
         static_cast<double>(e.speculative_drafted_total));
  Metric(&out, "dsv4_speculative_accepted_tokens_total", "counter",
         "Draft tokens the main model accepted (--speculative).",
         static_cast<double>(e.speculative_accepted_total));
  Metric(&out, "dsv4_queue_depth", "gauge", "Sequences waiting for a KV-cache slot.",
         static_cast<double>(e.waiting));
  Metric(&out, "dsv4_running_sequences", "gauge", "Sequences holding a KV-cache slot.",
         static_cast<double>(e.running));
  Metric(&out, "dsv4_max_sequences", "gauge", "KV-cache slots.", static_cast<double>(e.slots));
  Metric(&out, "dsv4_tokens_per_second", "gauge",
         "Generated tokens per second over the last few seconds.", e.tokens_per_second);
  Metric(&out, "dsv4_kv_cache_tokens", "gauge", "Tokens held in KV caches.",
         static_cast<double>(e.kv_tokens_used));
  Metric(&out, "dsv4_kv_cache_capacity_tokens", "gauge", "Tokens all KV-cache slots can hold.",
         static_cast<double>(e.kv_tokens_capacity));
  Metric(&out, "dsv4_kv_cache_usage_ratio", "gauge", "Fraction of KV-cache tokens in use.",
         e.kv_tokens_capacity > 0
             ? static_cast<double>(e.kv_tokens_used) / static_cast<double>(e.kv_tokens_capacity)
             : 0.0);
  Metric(&out, "dsv4_http_connections", "gauge", "Open HTTP connections.",
         static_cast<double>(http.open_connections));
  Metric(&out, "dsv4_http_connections_refused_total", "counter",
         "Connections refused with 503 because --max-connections were open.",
         static_cast<double>(http.refused_connections));
  return out;
}

}  // namespace dsv4::server
