// The manifest of a derived cache (apps/cache_manifest.hpp).
#include "apps/cache_manifest.hpp"

#include <sys/stat.h>

#include <fstream>

#include "core/errors.hpp"

namespace kktrain {

using Json = nlohmann::json;

Json manifest_file_entry(const std::string& path, const std::string& key) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InputError(key + " '" + path + "' cannot be read");
  return Json::array({path, int64_t(st.st_size),
                      int64_t(st.st_mtim.tv_sec) * 1000000000 + int64_t(st.st_mtim.tv_nsec)});
}

Json read_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  try {
    return Json::parse(in);
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
