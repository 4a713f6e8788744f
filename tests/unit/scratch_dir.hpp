// A temporary directory for one test: created empty (mkdtemp under GoogleTest's TempDir()) and
// removed with everything in it when the object goes, so a test leaves nothing behind in /tmp
// whether it passes, fails or throws.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace kktrain {

class ScratchDir {
 public:
  // A new directory named <TempDir()><prefix>XXXXXX.
  explicit ScratchDir(const std::string& prefix = "kktrain_test_") {
    std::string pattern = std::string(::testing::TempDir()) + prefix + "XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern);
    dir_ = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& dir() const { return dir_; }
  // The path of `name` inside the directory.
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

}  // namespace kktrain
