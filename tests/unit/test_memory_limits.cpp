// host_memory_limit (apps/train/memory_limits.hpp) on /proc and cgroup trees written by the test:
// the smallest of MemAvailable and the memory cgroup's room (each shared by the ranks of the node)
// and the process's own rlimits, the cgroup's working set without its inactive page cache, every
// ancestor's limit, cgroup v1 and v2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "apps/train/memory_limits.hpp"

namespace kktrain {
namespace {

namespace fs = std::filesystem;

class MemoryLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kktrain_memlimits_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    put("proc/meminfo", "MemTotal: 100000000 kB\nMemAvailable:   50000000 kB\n");
    put("proc/self/status", "VmSize: 1000 kB\nVmData: 500 kB\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  void put(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  MemoryLimit limit(int ranks) {
    return host_memory_limit(ranks, (root_ / "proc").string(), (root_ / "cg").string());
  }
  fs::path root_;
};

constexpr int64_t GiB = int64_t(1) << 30;

TEST_F(MemoryLimits, MemAvailableSharedByTheRanksOfTheNode) {
  put("proc/self/cgroup", "0::/\n");
  const MemoryLimit one = limit(1), four = limit(4);
  EXPECT_EQ(one.bytes, int64_t(50000000) * 1024);
  EXPECT_EQ(four.bytes, int64_t(50000000) * 1024 / 4);
  EXPECT_NE(four.source.find("MemAvailable"), std::string::npos) << four.source;
  EXPECT_NE(four.source.find("shared by the 4 ranks"), std::string::npos) << four.source;
}

TEST_F(MemoryLimits, CgroupV2LimitMinusWorkingSetAndTheSmallestAncestorCounts) {
  put("proc/self/cgroup", "0::/job/step\n");
  put("cg/job/memory.max", std::to_string(4 * GiB) + "\n");
  put("cg/job/memory.current", std::to_string(GiB) + "\n");
  put("cg/job/memory.stat", "anon 100\ninactive_file " + std::to_string(GiB / 2) + "\n");
  put("cg/job/step/memory.max", "max\n");
  const MemoryLimit m = limit(2);
  // 4 GiB - (1 GiB used - 0.5 GiB reclaimable cache) = 3.5 GiB, shared by 2 ranks.
  EXPECT_EQ(m.bytes, (4 * GiB - GiB / 2) / 2);
  EXPECT_NE(m.source.find("memory.max"), std::string::npos) << m.source;
  EXPECT_NE(m.source.find("cg/job"), std::string::npos) << m.source;
  // A tighter limit on the step itself wins.
  put("cg/job/step/memory.max", std::to_string(GiB) + "\n");
  put("cg/job/step/memory.current", "0\n");
  EXPECT_EQ(limit(1).bytes, GiB);
}

TEST_F(MemoryLimits, CgroupV1LimitInBytes) {
  put("proc/self/cgroup", "5:cpu:/x\n4:memory:/slurm/uid_0/job_7\n");
  put("cg/memory/slurm/uid_0/job_7/memory.limit_in_bytes", std::to_string(2 * GiB) + "\n");
  put("cg/memory/slurm/uid_0/job_7/memory.usage_in_bytes", std::to_string(GiB) + "\n");
  put("cg/memory/slurm/uid_0/job_7/memory.stat", "total_inactive_file 0\n");
  put("cg/memory/memory.limit_in_bytes", "9223372036854771712\n");  // the root: no limit
  const MemoryLimit m = limit(1);
  EXPECT_EQ(m.bytes, GiB);
  EXPECT_NE(m.source.find("memory.limit_in_bytes"), std::string::npos) << m.source;
}

TEST_F(MemoryLimits, NoCgroupFilesLeaveMemAvailable) {
  put("proc/self/cgroup", "0::/nowhere\n4:memory:/nowhere\n");
  EXPECT_EQ(limit(1).bytes, int64_t(50000000) * 1024);
}

}  // namespace
}  // namespace kktrain
