// dist/communicator.h: how a process knows it was started as one of several
// (the MPI transport itself runs in tests/integration/test_mpi.py).
#include "dist/communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace dsv4::dist {
namespace {

TEST(Launch, SeveralProcessesOnlyWithASizeAboveOne) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) unsetenv(name);
  EXPECT_FALSE(LaunchedAsSeveralProcesses());
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);  // mpirun -n 1: one process, run as usual
  EXPECT_FALSE(LaunchedAsSeveralProcesses());
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_TRUE(LaunchedAsSeveralProcesses());
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("PMI_SIZE", "2", 1);  // MPICH / Slurm
  EXPECT_TRUE(LaunchedAsSeveralProcesses());
  unsetenv("PMI_SIZE");
}

TEST(Launch, BuiltWithMpiAsConfigured) {
  EXPECT_EQ(BuiltWithMpi(), DSV4_TEST_WITH_MPI != 0);
#if !DSV4_TEST_WITH_MPI
  // A build without MPI refuses to run under mpirun, naming the packages.
  auto world = MpiWorld();
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(world.status().message().find("built without MPI"), std::string::npos);
  EXPECT_NE(world.status().hint().find("libopenmpi-dev"), std::string::npos);
#endif
}

TEST(Bytes, ViewsTheSameMemory) {
  float f[3] = {1, 2, 3};
  const auto b = MutableBytes(std::span<float>(f));
  EXPECT_EQ(b.size(), sizeof(f));
  EXPECT_EQ(static_cast<void*>(b.data()), static_cast<void*>(f));
}

}  // namespace
}  // namespace dsv4::dist
