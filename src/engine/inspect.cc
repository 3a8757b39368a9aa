#include "engine/inspect.h"

#include "model/deepseek_v4/inspect.h"

namespace dsv4 {

Result<std::string> InspectModel(const std::string& path, const std::vector<int64_t>& contexts) {
  return deepseek_v4::InspectPath(
      path, contexts.empty() ? deepseek_v4::kDefaultInspectContexts : contexts);
}

}  // namespace dsv4
