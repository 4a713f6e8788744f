// FileLines (core/files.hpp): a regular file's lines read a block at a time. Lines longer than a
// block, empty lines, a last line without '\n' and the numbering come out as written; a line
// over the caller's bound is refused naming the file and its number, before more of it is read.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "unit/scratch_dir.hpp"

namespace kktrain {
namespace {

std::string write(const ScratchDir& dir, const std::string& text) {
  const std::string path = dir.path("lines.txt");
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::vector<std::string> all_lines(const std::string& path, std::size_t max_bytes = SIZE_MAX) {
  FileLines in;
  EXPECT_EQ(in.open(path), std::nullopt);
  std::vector<std::string> out;
  std::string line;
  while (in.next(&line, max_bytes)) {
    out.push_back(line);
    EXPECT_EQ(in.line_number(), static_cast<int64_t>(out.size()));
  }
  return out;
}

TEST(FileLines, ReturnsTheLinesAsWritten) {
  ScratchDir dir;
  const std::string long_line(200000, 'x');  // three 64 KiB blocks
  const std::vector<std::string> want = {"a", "", long_line, "b\r", std::string("c\0d", 3), "e"};
  std::string text;
  for (const auto& l : want) text += l + "\n";
  text.pop_back();  // the last line without its '\n'
  EXPECT_EQ(all_lines(write(dir, text)), want);
  EXPECT_EQ(all_lines(write(dir, "")), std::vector<std::string>{});
  EXPECT_EQ(all_lines(write(dir, "\n")), std::vector<std::string>{""});
}

TEST(FileLines, RefusesALineOverTheBound) {
  ScratchDir dir;
  const std::string path = write(dir, "short\n" + std::string(300000, 'y') + "\nnext\n");
  FileLines in;
  ASSERT_EQ(in.open(path), std::nullopt);
  std::string line;
  ASSERT_TRUE(in.next(&line, 100000));
  EXPECT_EQ(line, "short");
  try {
    in.next(&line, 100000);
    FAIL() << "a 300000-byte line passed a 100000-byte bound";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + path + "':2: the line is longer than 100000 bytes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(all_lines(path, 300000).size(), 3u);  // exactly at the bound: accepted
}

TEST(FileLines, OpensOnlyRegularFiles) {
  ScratchDir dir;
  FileLines in;
  EXPECT_NE(in.open(dir.dir()), std::nullopt);  // a directory
  std::string line;
  EXPECT_FALSE(in.next(&line));
}

}  // namespace
}  // namespace kktrain
