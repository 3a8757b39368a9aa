// /metrics: Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/). HTTP request
// counts by route and status come from RequestCounters; the engine's
// counters and gauges (queue depth, running sequences, tokens, tokens/s,
// KV-cache use) from Engine::Metrics(); open and refused connections from the
// connection layer. Used by server.cc.
#ifndef DSV4_SERVER_METRICS_H_
#define DSV4_SERVER_METRICS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/engine.h"

namespace dsv4::server {

// Thread-safe request counters.
class RequestCounters {
 public:
  void Record(const std::string& route, int status);
  std::map<std::pair<std::string, int>, int64_t> Snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
};

// The connection layer's gauges (http_server.h).
struct HttpMetrics {
  int64_t open_connections = 0;
  int64_t refused_connections = 0;  // over --max-connections, since start
};

// The whole /metrics page.
std::string RenderMetrics(const EngineMetrics& engine,
                          const std::map<std::pair<std::string, int>, int64_t>& requests,
                          const HttpMetrics& http = {});

}  // namespace dsv4::server

#endif  // DSV4_SERVER_METRICS_H_
