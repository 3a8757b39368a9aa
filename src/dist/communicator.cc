// Process-launch detection (communicator.h).
#include "dist/communicator.h"

#include <cstdlib>

namespace dsv4::dist {

bool LaunchedAsSeveralProcesses() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && std::atoi(v) > 1) return true;
  }
  return false;
}

}  // namespace dsv4::dist
