// How much memory this process may still take, as a cluster node sees it: the smallest of the
// node's MemAvailable, the memory cgroup's remaining limit (Slurm runs each job in one: cgroup v2
// memory.max, v1 memory.limit_in_bytes; every limit up the hierarchy counts), both shared by the
// ranks of the job on this node, and the process's own RLIMIT_AS / RLIMIT_DATA headroom. Page
// cache the kernel can drop (inactive file pages) does not count as used.
#pragma once

#include <cstdint>
#include <string>

namespace kktrain {

struct MemoryLimit {
  int64_t bytes = -1;  // -1: unknown
  std::string
      source;  // what set it, for messages: "the cgroup's memory.max (... shared by 2 ranks)"
};

// Reads /proc (proc_root) and the cgroup file systems (cgroup_root, normally /sys/fs/cgroup), so
// tests can give it a tree of their own.
MemoryLimit host_memory_limit(int ranks_on_node, const std::string& proc_root = "/proc",
                              const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace kktrain
