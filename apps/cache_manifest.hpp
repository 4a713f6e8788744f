// The manifest beside a cache kktrain derives from its inputs as a run starts (the token shards of
// a text corpus, apps/text_data.hpp; the rendered examples, apps/example_cache.hpp): what the cache
// was made from, each input file by path, size and modification time, so that a restart reuses
// the cache exactly while nothing it was made from changed.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace kktrain {

// A file's identity: [path, size, modification time in ns]. InputError "KEY 'PATH' cannot be
// read" when stat fails (`key` names the setting the path came from).
nlohmann::json manifest_file_entry(const std::string& path, const std::string& key);
// The manifest at `path`, or null when it is absent or not JSON.
nlohmann::json read_manifest(const std::string& path);
// Whether `have` (a manifest read back) describes what `want` does, ignoring the keys in
// `results` (what making the cache added: counts, file lists).
bool manifest_matches(const nlohmann::json& have, const nlohmann::json& want,
                      std::initializer_list<const char*> results);

}  // namespace kktrain
