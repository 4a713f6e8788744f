// The protocol of a cache kktrain derives from its inputs as a run starts (the token shards of a
// text corpus, apps/dataprep/text_data.hpp; the rendered examples,
// apps/dataprep/example_cache.hpp), in the directory `dir` with its manifest `dir`/manifest.json
// (apps/dataprep/cache_manifest.hpp):
//
//   rank 0       describe  what this run's cache would be made from;
//                reuse     the manifest read back describes a made cache, made from what this
//                          run's would be: said, and nothing is written;
//                remove    otherwise (warned when a cache was there) the directory is made, the
//                          manifest removed first, then the cache's files, so that a failure below
//                          leaves no manifest over a stale cache;
//                build     the cache made, which gives the manifest to write;
//                write     the manifest written atomically; the directories made are kept (on an
//                          error they are removed again while empty);
//   every rank   check     the manifest read back describes a made cache, else one error saying
//                          so (train.output_dir not on a file system every rank sees).
//
// Errors of any step are one line on every rank (parallel/agree.hpp). What differs between
// caches (the manifest's contents, the files, the messages) is the CacheSteps a cache passes.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace kktrain {

class Communicator;

// What one cache does at each step of the protocol.
struct CacheSteps {
  std::string dir;  // the cache's directory; its manifest is dir + "/manifest.json"
  // What this run's cache would be made from (`want`; before the manifest is read back).
  std::function<nlohmann::json()> describe;
  // Whether `have` (a manifest read back, null when absent) describes a made cache.
  std::function<bool(const nlohmann::json& have)> present;
  // Whether the made cache `have` describes was made from what `want` describes.
  std::function<bool(const nlohmann::json& have, const nlohmann::json& want)> matches;
  // The line logged when it is reused (info), and the one when a present cache is made again
  // (warning).
  std::function<std::string(const nlohmann::json& have)> reused;
  std::string remade;
  // Removes the cache's files from `dir` (after the manifest; errors ignored).
  std::function<void()> remove_files;
  // Makes the cache in `dir` from what `want` describes; returns the manifest to write.
  std::function<nlohmann::json(nlohmann::json want)> build;
  // The check on every rank after rank 0 made it: whether the manifest read back shows the cache
  // (present when unset), and the error's text when it does not.
  std::function<bool(const nlohmann::json& m)> ready;
  std::string missing;
};

// The cache made or reused by rank 0 as above, then checked on every rank (collective). Returns
// the manifest as this rank read it back.
nlohmann::json derive_cache(const CacheSteps& c, Communicator& comm);

}  // namespace kktrain
