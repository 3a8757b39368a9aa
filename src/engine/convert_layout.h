// `dsv4 convert-layout` behind the engine: the seed family's checkpoint
// layout converter (model/seed/convert_layout.h, S-143), under the names the
// front ends use.
#ifndef DSV4_ENGINE_CONVERT_LAYOUT_H_
#define DSV4_ENGINE_CONVERT_LAYOUT_H_

#include <string>

#include "base/status.h"
#include "model/seed/convert_layout.h"

namespace dsv4 {

using ConvertLayoutOptions = seed::ConvertLayoutOptions;
using ConvertLayoutReport = seed::ConvertLayoutReport;

// Rewrites the seed checkpoint in_dir's dense MLPs into out_dir (see
// seed::ConvertSeedLayout for what is converted, kept and warned about).
inline Result<ConvertLayoutReport> ConvertCheckpointLayout(const std::string& in_dir,
                                                           const std::string& out_dir,
                                                           const ConvertLayoutOptions& options) {
  return seed::ConvertSeedLayout(in_dir, out_dir, options);
}

}  // namespace dsv4

#endif  // DSV4_ENGINE_CONVERT_LAYOUT_H_
