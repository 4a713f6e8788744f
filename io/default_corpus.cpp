// The embedded default corpus: a deterministic stream of simple English sentences generated from
// a small grammar. It has real structure at several scales (spelling, word order, agreement,
// punctuation, paragraphs), so a byte-level model's loss falls visibly within a few hundred
// steps, and it needs no download: the same seed gives the same bytes on every machine.
#include <string>
#include <vector>

#include "core/random.hpp"
#include "io/data.hpp"

namespace kktrain {

namespace {

const std::vector<std::string> kNouns = {
    "cat",    "dog",      "bird",    "river",   "teacher", "farmer",   "child",
    "city",   "garden",   "machine", "train",   "storm",   "letter",   "window",
    "forest", "engineer", "sailor",  "baker",   "library", "mountain", "lamp",
    "clock",  "horse",    "friend",  "village", "market",  "painter",  "student"};
const std::vector<std::string> kAdjectives = {
    "small",   "quiet",   "old",    "bright", "tired", "happy",   "green", "cold",   "heavy",
    "careful", "strange", "gentle", "busy",   "young", "distant", "warm",  "silver", "patient"};
const std::vector<std::string> kVerbs = {"sees",     "finds",   "follows",   "carries", "watches",
                                         "builds",   "paints",  "remembers", "visits",  "opens",
                                         "repairs",  "answers", "counts",    "crosses", "greets",
                                         "measures", "reads",   "hears"};
const std::vector<std::string> kAdverbs = {"slowly", "quietly", "often", "suddenly", "always",
                                           "rarely", "gladly",  "again", "early",    "carefully"};
const std::vector<std::string> kPlaces = {
    "near the river", "in the morning", "after the rain", "at the market", "under the old bridge",
    "before dinner",  "in the garden",  "on the hill",    "by the window", "during the storm"};
const std::vector<std::string> kLinks = {"and then", "because", "while", "but", "so", "although"};

class Generator {
 public:
  explicit Generator(uint64_t seed) : seed_(seed) {}
  const std::string& pick(const std::vector<std::string>& v) { return v[next() % v.size()]; }
  bool coin(unsigned percent) { return next() % 100 < percent; }

  std::string noun_phrase() {
    std::string s = coin(60) ? "the " : "a ";
    if (coin(50)) s += pick(kAdjectives) + " ";
    return s + pick(kNouns);
  }
  std::string clause() {
    std::string s = noun_phrase() + " ";
    if (coin(30)) s += pick(kAdverbs) + " ";
    s += pick(kVerbs) + " " + noun_phrase();
    if (coin(40)) s += " " + pick(kPlaces);
    return s;
  }
  std::string sentence() {
    std::string s = clause();
    if (coin(35)) s += ", " + pick(kLinks) + " " + clause();
    s[0] = static_cast<char>(s[0] - 'a' + 'A');
    return s + (coin(10) ? "?" : ".");
  }

 private:
  uint64_t next() { return hash3(seed_, 0x636f72707573ull, counter_++); }
  uint64_t seed_;
  uint64_t counter_ = 0;
};

}  // namespace

std::string default_corpus(std::size_t bytes, uint64_t seed) {
  Generator g(seed);
  std::string out;
  out.reserve(bytes + 256);
  while (out.size() < bytes) {
    const int sentences = 3 + static_cast<int>(g.pick(kNouns).size() % 4);
    for (int i = 0; i < sentences; ++i) out += (i ? " " : "") + g.sentence();
    out += "\n\n";
  }
  out.resize(bytes);
  return out;
}

}  // namespace kktrain
