// The protocol of a run's derived caches (apps/dataprep/cache_protocol.hpp).
#include "apps/dataprep/cache_protocol.hpp"

#include <filesystem>
#include <utility>

#include "apps/dataprep/cache_manifest.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "io/durable.hpp"
#include "parallel/agree.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// Rank 0's part: reuse, or remove, build and write.
void make_or_reuse(const CacheSteps& c, const std::string& manifest_path) {
  Json want = c.describe();
  const Json have = read_manifest(manifest_path);
  if (c.present(have)) {
    if (c.matches(have, want)) {
      log::info(c.reused(have));
      return;
    }
    log::warn(c.remade);
  }
  MadeDirectories made(c.dir);  // removed again (while empty) when making the cache fails
  std::error_code ec;
  // The manifest goes first: a failure below then leaves no manifest over a stale cache.
  fs::remove(manifest_path, ec);
  c.remove_files();
  const Json m = c.build(std::move(want));
  write_text_atomically(manifest_path, m.dump(1) + "\n");
  made.keep();
}

}  // namespace

Json derive_cache(const CacheSteps& c, Communicator& comm) {
  const std::string manifest_path = c.dir + "/manifest.json";
  collectively(comm, [&] {
    if (comm.rank() == 0) make_or_reuse(c, manifest_path);
  });
  return collectively(comm, [&] {
    Json m = read_manifest(manifest_path);
    if (!(c.ready ? c.ready(m) : c.present(m))) throw RuntimeFailure(c.missing);
    return m;
  });
}

}  // namespace kktrain
