// The manifest of a derived cache (apps/cache_manifest.hpp).
#include "apps/cache_manifest.hpp"

#include <sys/stat.h>

#include "core/errors.hpp"
#include "core/files.hpp"

namespace kktrain {

using Json = nlohmann::json;

Json manifest_file_entry(const std::string& path, const std::string& key) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InputError(key + " '" + path + "' cannot be read");
  return Json::array({path, int64_t(st.st_size),
                      int64_t(st.st_mtim.tv_sec) * 1000000000 + int64_t(st.st_mtim.tv_nsec)});
}

Json read_manifest(const std::string& path) {
  // a regular file (core/files.hpp) of at most 64 MiB: a manifest lists a few hundred bytes a
  // data file; anything else is no manifest (the cache is made again)
  std::string text;
  if (read_regular_file(&text, path, std::size_t(64) << 20)) return nullptr;
  try {
    return Json::parse(text);
  } catch (const Json::exception&) {
    return nullptr;
  }
}

bool manifest_matches(const Json& have, const Json& want,
                      std::initializer_list<const char*> results) {
  if (!have.is_object()) return false;
  Json same = have;
  for (const char* k : results) same.erase(k);
  return same == want;
}

}  // namespace kktrain
