// The cleanup of killed processes' temporaries (io/durable.hpp remove_stale_temporaries) removes
// only what kktrain makes beside an output: for a dead pid that is not this process's, a regular
// file of this user, or a directory holding only regular files named as an export's. A user's
// directory so named (holding other files, or a subdirectory), a symbolic link, this process's
// own temporary and look-alike names are kept; a dead export's ".old" with nothing at the output
// is put back. export_directory_target: a symbolic link's target, never the link.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/durable.hpp"
#include "unit/scratch_dir.hpp"

namespace kktrain {
namespace {

namespace fs = std::filesystem;

// The pid of a child that has exited and been reaped.
long dead_pid() {
  const pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  int status = 0;
  ::waitpid(p, &status, 0);
  return p;
}

void write(const fs::path& p, const std::string& text = "x") {
  std::ofstream(p) << text;
}

std::vector<std::string> listed(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(StaleTemporaries, OnlyWhatKktrainMakesIsRemoved) {
  ScratchDir scratch;
  const fs::path d = fs::path(scratch.dir());
  const std::string tmp = ".a.tmp.";
  // removed: a dead one's file, a dead one's directory of an export's files
  const std::string file = tmp + std::to_string(dead_pid());
  write(d / file);
  const std::string dir = tmp + std::to_string(dead_pid());
  fs::create_directory(d / dir);
  write(d / dir / "config.json");
  write(d / dir / "model-00001-of-00002.safetensors");
  write(d / dir / "adapter_config.json");
  // kept: a user's directories so named, a symbolic link, this process's, look-alikes
  const std::string user = tmp + std::to_string(dead_pid());
  fs::create_directory(d / user);
  write(d / user / "notes.txt");
  const std::string nested = tmp + std::to_string(dead_pid());
  fs::create_directories(d / nested / "sub");
  write(d / nested / "config.json");
  const std::string readme = tmp + std::to_string(dead_pid());
  fs::create_directory(d / readme);
  write(d / readme / "README.md");
  const std::string link = tmp + std::to_string(dead_pid());
  fs::create_directory_symlink(d / user, d / link);
  const std::string ours = tmp + std::to_string(::getpid());
  write(d / ours);
  const long dead = dead_pid();
  const std::vector<std::string> look_alikes = {
      tmp + "0" + std::to_string(dead), tmp + std::to_string(dead) + "x",
      tmp + "-" + std::to_string(dead), "a.tmp." + std::to_string(dead),
      tmp + std::to_string(dead) + ".bak"};
  for (const auto& n : look_alikes) write(d / n);
  write(d / "a");

  const RemovedTemporaries r = remove_stale_temporaries((d / "a").string());
  std::vector<std::string> removed;
  for (const auto& p : r.paths) removed.push_back(fs::path(p).filename().string());
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> want = {file, dir};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(removed, want);
  EXPECT_EQ(r.bytes, 4);
  for (const auto& n : {user, nested, readme, link, ours}) {
    EXPECT_TRUE(fs::exists(fs::symlink_status(d / n))) << n << " was removed";
  }
  for (const auto& n : look_alikes) EXPECT_TRUE(fs::exists(d / n)) << n << " was removed";
  EXPECT_EQ(listed(d / user), std::vector<std::string>{"notes.txt"});
  EXPECT_TRUE(fs::is_symlink(d / link));
}

TEST(StaleTemporaries, AStrandedPreviousExportIsPutBackOnlyWhenKktrainMadeIt) {
  ScratchDir scratch;
  const fs::path d = fs::path(scratch.dir());
  const std::string old = ".b.tmp." + std::to_string(dead_pid()) + ".old";
  fs::create_directory(d / old);
  write(d / old / "config.json");
  write(d / old / "model.safetensors");
  const RemovedTemporaries r = remove_stale_temporaries((d / "b").string());
  EXPECT_EQ(r.restored, (d / old).string());
  EXPECT_EQ(listed(d / "b"), (std::vector<std::string>{"config.json", "model.safetensors"}));
  // a user's directory so named is neither put back nor removed
  const std::string user = ".c.tmp." + std::to_string(dead_pid()) + ".old";
  fs::create_directory(d / user);
  write(d / user / "notes.txt");
  const RemovedTemporaries u = remove_stale_temporaries((d / "c").string());
  EXPECT_TRUE(u.restored.empty());
  EXPECT_TRUE(u.paths.empty());
  EXPECT_FALSE(fs::exists(d / "c"));
  EXPECT_TRUE(fs::exists(d / user / "notes.txt"));
}

TEST(ExportDirectoryTarget, ALinkLeadsToItsTarget) {
  ScratchDir scratch;
  const fs::path d = fs::path(scratch.dir());
  fs::create_directory(d / "target");
  fs::create_directory_symlink(d / "target", d / "link");
  fs::create_directory_symlink(d / "link", d / "link2");
  const std::string target = fs::canonical(d / "target").string();
  EXPECT_EQ(export_directory_target((d / "link").string()), target);
  EXPECT_EQ(export_directory_target((d / "link2").string()), target);
  EXPECT_EQ(export_directory_target((d / "link").string() + "/"), target);
  EXPECT_EQ(export_directory_target((d / "target").string()), (d / "target").string());
  fs::create_directory_symlink(d / "nowhere", d / "dangling");
  EXPECT_EQ(export_directory_target((d / "dangling").string()), (d / "dangling").string());
  EXPECT_EQ(export_directory_target((d / "new").string()), (d / "new").string());
}

TEST(ExportDirectoryFile, TheNamesExportsWrite) {
  for (const char* n : {"config.json", "model.safetensors", "model-00001-of-00003.safetensors",
                        "model.safetensors.index.json", "tokenizer.json", "adapter_config.json",
                        "adapter_model.safetensors"}) {
    EXPECT_TRUE(export_directory_file(n)) << n;
  }
  for (const char* n : {"README.md", "notes.txt", "model", ".safetensors", "x.safetensors", ""}) {
    EXPECT_FALSE(export_directory_file(n)) << n;
  }
}

}  // namespace
}  // namespace kktrain
