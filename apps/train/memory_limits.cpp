#include "apps/train/memory_limits.hpp"

#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "core/strings.hpp"
#include "optim/audit.hpp"

namespace kktrain {

namespace {

// The first number of a file ("max" and missing files: -1).
int64_t read_number(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return -1;
  try {
    return static_cast<int64_t>(std::stoull(s));
  } catch (...) {
    return -1;
  }
}

// A "key value" line of a file (/proc/meminfo "MemAvailable: 123 kB", memory.stat
// "inactive_file 123"); -1 when absent.
int64_t read_key(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::istringstream is(line);
    std::string k;
    long long v = -1;
    if ((is >> k >> v) && (k == key || k == key + ":")) return v;
  }
  return -1;
}

// Limits above this are "no limit" (v1 writes 2^63 rounded down to a page).
constexpr int64_t kNoLimit = int64_t(1) << 60;

struct Candidate {
  int64_t bytes;
  std::string source;
};

// The remaining room of the memory cgroup: limit minus the working set (usage without inactive
// file pages), the smallest over the cgroup and its ancestors.
void cgroup_limits(const std::string& proc_root, const std::string& cg_root,
                   std::vector<Candidate>& out) {
  std::ifstream f(proc_root + "/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    // "0::/path" (v2) or "4:memory:/path" (v1)
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = controllers.empty();
    if (!v2 && controllers != "memory" && controllers.find("memory") == std::string::npos) continue;
    const std::vector<std::string> mounts =
        v2 ? std::vector<std::string>{cg_root, cg_root + "/unified"}
           : std::vector<std::string>{cg_root + "/memory"};
    const char* limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
    const char* usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
    const char* inactive_key = v2 ? "inactive_file" : "total_inactive_file";
    for (const auto& mount : mounts) {
      // The cgroup's directory, then each ancestor up to the mount (the namespace's root).
      for (std::string p = path;; p = p.substr(0, p.rfind('/'))) {
        const std::string dir = mount + (p == "/" ? "" : p);
        const int64_t limit = read_number(dir + "/" + limit_file);
        if (limit >= 0 && limit < kNoLimit) {
          const int64_t usage = std::max<int64_t>(0, read_number(dir + "/" + usage_file));
          const int64_t inactive =
              std::max<int64_t>(0, read_key(dir + "/memory.stat", inactive_key));
          out.push_back({limit - std::max<int64_t>(0, usage - inactive),
                         std::string("the memory cgroup's ") + limit_file + " of " +
                             format_bytes(limit) + " (" + dir + ")"});
        }
        if (p.empty() || p == "/") break;
      }
    }
  }
}

}  // namespace

MemoryLimit host_memory_limit(int ranks_on_node, const std::string& proc_root,
                              const std::string& cgroup_root) {
  const int ranks = std::max(1, ranks_on_node);
  const std::string shared =
      ranks > 1 ? ", shared by the " + std::to_string(ranks) + " ranks on this node" : "";
  std::vector<Candidate> node;  // node-wide amounts: divided among the ranks
  const int64_t avail_kib = read_key(proc_root + "/meminfo", "MemAvailable");
  if (avail_kib >= 0) node.push_back({avail_kib * 1024, "MemAvailable of /proc/meminfo"});
  cgroup_limits(proc_root, cgroup_root, node);
  std::vector<Candidate> all;
  for (auto& c : node) all.push_back({c.bytes / ranks, c.source + shared});
  // The process's own limits: address space (VmSize counts against it) and data (VmData).
  struct Rl {
    int resource;
    const char* name;
    const char* used_key;
  };
  for (const Rl& r : {Rl{RLIMIT_AS, "RLIMIT_AS (ulimit -v)", "VmSize"},
                      Rl{RLIMIT_DATA, "RLIMIT_DATA (ulimit -d)", "VmData"}}) {
    rlimit lim{};
    if (getrlimit(r.resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) continue;
    const int64_t used =
        std::max<int64_t>(0, read_key(proc_root + "/self/status", r.used_key)) * 1024;
    all.push_back({static_cast<int64_t>(lim.rlim_cur) - used,
                   std::string(r.name) + " of " + format_bytes(static_cast<int64_t>(lim.rlim_cur)) +
                       ", " + format_bytes(used) + " of it in use"});
  }
  MemoryLimit best;
  for (const auto& c : all) {
    if (best.bytes < 0 || c.bytes < best.bytes) best = {std::max<int64_t>(0, c.bytes), c.source};
  }
  return best;
}

}  // namespace kktrain
