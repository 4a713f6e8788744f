// A tokenizer's files, found once (text/tokenizer_files.hpp).
#include "text/tokenizer_files.hpp"

#include <sys/stat.h>

namespace kktrain::text {

namespace {

struct Stat {
  bool exists = false, directory = false;
};

Stat stat_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {true, S_ISDIR(st.st_mode)};
}

}  // namespace

std::string TokenizerFiles::beside(std::string_view name) const {
  return dir + "/" + std::string(name);
}

bool TokenizerFiles::present() const {
  return stat_of(json).exists;
}

TokenizerFiles locate_tokenizer(const std::string& path) {
  TokenizerFiles f;
  f.given = path;
  if (stat_of(path).directory) {
    f.dir = path;
    f.json = path + "/tokenizer.json";
  } else {
    const size_t slash = path.rfind('/');
    f.dir = slash == std::string::npos ? "." : path.substr(0, slash);
    f.json = path;
  }
  if (const std::string c = f.beside("tokenizer_config.json"); stat_of(c).exists) f.config = c;
  if (const std::string t = f.beside("chat_template.jinja"); stat_of(t).exists) f.chat_template = t;
  return f;
}

}  // namespace kktrain::text
