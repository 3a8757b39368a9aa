#include "engine/inspect.h"

#include "model/deepseek_v4/inspect.h"

namespace dsv4 {

Result<std::string> InspectModel(const std::string& path) { return deepseek_v4::InspectPath(path); }

}  // namespace dsv4
