// A tokenizer's files, found once (text/tokenizer_files.hpp): the tokenizer.json a path names,
// and beside it the tokenizer_config.json and chat_template.jinja every reader of a run uses
// (the tokenizer's special tokens, the example cache's manifest, the template lookup, the export).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/unit/tokenizer_test_util.hpp"
#include "text/tokenizer_files.hpp"

namespace kktrain::text {
namespace {

using TokenizerFilesTest = TokenizerTest;

TEST_F(TokenizerFilesTest, ADirectoryNamesItsTokenizerJsonAndTheFilesBesideIt) {
  const std::string d = new_dir();
  TokenizerFiles f = locate_tokenizer(d);
  EXPECT_EQ(f.given, d);
  EXPECT_EQ(f.json, d + "/tokenizer.json");
  EXPECT_EQ(f.dir, d);
  EXPECT_FALSE(f.present());
  EXPECT_EQ(f.config, "");
  EXPECT_EQ(f.chat_template, "");
  std::ofstream(d + "/tokenizer.json") << "{}";
  std::ofstream(d + "/tokenizer_config.json") << "{}";
  ::mkfifo((d + "/chat_template.jinja").c_str(), 0600);  // named: its reader refuses a FIFO
  f = locate_tokenizer(d);
  EXPECT_TRUE(f.present());
  EXPECT_EQ(f.config, d + "/tokenizer_config.json");
  EXPECT_EQ(f.chat_template, d + "/chat_template.jinja");
  EXPECT_EQ(f.beside("tokenizer.model"), d + "/tokenizer.model");
}

TEST_F(TokenizerFilesTest, AFileIsTheTokenizerJsonAndItsFolderHoldsTheRest) {
  const std::string d = new_dir();
  std::ofstream(d + "/my_tok.json") << "{}";
  std::ofstream(d + "/chat_template.jinja") << "{{ messages }}";
  const TokenizerFiles f = locate_tokenizer(d + "/my_tok.json");
  EXPECT_EQ(f.json, d + "/my_tok.json");
  EXPECT_EQ(f.dir, d);
  EXPECT_TRUE(f.present());
  EXPECT_EQ(f.config, "");
  EXPECT_EQ(f.chat_template, d + "/chat_template.jinja");
  EXPECT_EQ(locate_tokenizer("tokenizer.json").dir, ".");  // a bare name: the current folder
}

// The loaded tokenizer keeps the files it was loaded from: the template lookup and the caches
// read these, not a second lookup of their own.
TEST_F(TokenizerFilesTest, TheTokenizerKeepsTheFilesItWasLoadedFrom) {
  const Json config = {{"eos_token", "b"}};
  const auto t = load(bpe(letters("ab"), {}), config);
  const TokenizerFiles& f = t->files();
  EXPECT_EQ(f.json, t->path());
  EXPECT_EQ(f.config, f.dir + "/tokenizer_config.json");
  EXPECT_EQ(t->config().path, f.config);
  EXPECT_EQ(t->config().special_tokens.at("eos_token"), "b");
}

}  // namespace
}  // namespace kktrain::text
