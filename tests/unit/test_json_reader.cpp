// core/json_reader.hpp: every error an InputError naming the file and the key path, in the
// tokenizer files' layout (fail) and config.json's (fail_valued).
#include "core/json_reader.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/errors.hpp"

namespace kktrain {
namespace {

using nlohmann::json;
using namespace json_reader;

constexpr char kTok[] = "tokenizer file ";
constexpr char kPlain[] = "";
using TokWhere = JsonWhere<kTok>;
using PlainWhere = JsonWhere<kPlain>;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(JsonReader, KeyPathsGrowWithAt) {
  const std::string file = "t.json";
  const TokWhere root{file, ""};
  EXPECT_EQ(root.at("model").key, "model");
  EXPECT_EQ(root.at("model").at("merges").at(12).key, "model.merges[12]");
  EXPECT_EQ(root.at(3).key, "[3]");
  EXPECT_EQ(&root.at("x").file, &file);
}

TEST(JsonReader, FailNamesFileAndKey) {
  const std::string file = "dir/tokenizer.json";
  const TokWhere root{file, ""};
  EXPECT_EQ(message_of([&] { root.fail("not valid"); }),
            "tokenizer file 'dir/tokenizer.json': not valid");
  EXPECT_EQ(message_of([&] { root.at("model").at("vocab").fail("empty"); }),
            "tokenizer file 'dir/tokenizer.json': key 'model.vocab': empty");
  const PlainWhere plain{file, ""};
  EXPECT_EQ(message_of([&] { plain.at("a").fail("x"); }), "'dir/tokenizer.json': key 'a': x");
}

TEST(JsonReader, FailValuedShowsTheValueFound) {
  const std::string file = "config.json";
  const PlainWhere w{file, "rope_scaling"};
  const json v = json::parse(R"({"factor": -2, "name": "a\"b", "n": null})");
  EXPECT_EQ(message_of([&] { w.at("factor").fail_valued(&v["factor"], "not positive"); }),
            "'config.json': rope_scaling.factor = -2: not positive");
  EXPECT_EQ(message_of([&] { w.at("name").fail_valued(&v["name"], "bad"); }),
            "'config.json': rope_scaling.name = \"a\\\"b\": bad");
  EXPECT_EQ(message_of([&] { w.at("n").fail_valued(&v["n"], "bad"); }),
            "'config.json': rope_scaling.n = null: bad");
  EXPECT_EQ(message_of([&] {
              PlainWhere{file, "vocab_size"}.fail_valued(nullptr, "missing");
            }),
            "'config.json': vocab_size: missing");
  EXPECT_EQ(message_of([&] {
              TokWhere{file, "k"}.fail_valued(nullptr, "m");
            }),
            "tokenizer file 'config.json': k: m");
}

TEST(JsonReader, MemberAndOptionalMember) {
  const std::string file = "t.json";
  const TokWhere w{file, "model"};
  const json obj = json::parse(R"({"a": 1, "n": null})");
  EXPECT_EQ(member(obj, "a", w), json(1));
  EXPECT_EQ(message_of([&] { member(obj, "b", w); }),
            "tokenizer file 't.json': key 'model.b': missing");
  EXPECT_EQ(message_of([&] { member(json::array(), "b", w); }),
            "tokenizer file 't.json': key 'model': expected an object, found array");
  EXPECT_EQ(message_of([&] {
              member(json(1), "b", TokWhere{file, ""});
            }),
            "tokenizer file 't.json': expected an object, found number");
  EXPECT_EQ(optional_member(obj, "a"), &obj["a"]);
  EXPECT_EQ(optional_member(obj, "n"), nullptr);  // null is absent
  EXPECT_EQ(optional_member(obj, "b"), nullptr);
  EXPECT_EQ(optional_member(json(3), "b"), nullptr);  // not an object: nothing in it
}

TEST(JsonReader, TypedReadsNameTheTypeFound) {
  const std::string file = "t.json";
  const TokWhere w{file, "k"};
  EXPECT_EQ(as_string(json("s"), w), "s");
  EXPECT_TRUE(as_bool(json(true), w));
  EXPECT_EQ(as_int(json(-7), w), -7);
  EXPECT_EQ(message_of([&] { as_string(json(1.5), w); }),
            "tokenizer file 't.json': key 'k': expected a string, found number");
  EXPECT_EQ(message_of([&] { as_bool(json("true"), w); }),
            "tokenizer file 't.json': key 'k': expected true or false, found string");
  EXPECT_EQ(message_of([&] { as_int(json(1.5), w); }),
            "tokenizer file 't.json': key 'k': expected an integer, found number");
  EXPECT_EQ(message_of([&] { as_int(json(nullptr), w); }),
            "tokenizer file 't.json': key 'k': expected an integer, found null");
}

TEST(JsonReader, BoolOrTypeOfUnsupported) {
  const std::string file = "t.json";
  const TokWhere w{file, "normalizer"};
  const json obj = json::parse(R"({"t": true, "n": null, "s": "x", "type": "NFC"})");
  EXPECT_TRUE(bool_or(obj, "t", false, w));
  EXPECT_TRUE(bool_or(obj, "n", true, w));
  EXPECT_FALSE(bool_or(obj, "absent", false, w));
  EXPECT_EQ(message_of([&] { bool_or(obj, "s", false, w); }),
            "tokenizer file 't.json': key 'normalizer.s': expected true or false, found string");
  EXPECT_EQ(type_of(obj, w), "NFC");
  EXPECT_EQ(message_of([&] { type_of(json::object(), w); }),
            "tokenizer file 't.json': key 'normalizer.type': missing");
  EXPECT_EQ(message_of([&] { type_of(json::parse(R"({"type": 1})"), w); }),
            "tokenizer file 't.json': key 'normalizer.type': expected a string, found number");
  EXPECT_EQ(message_of([&] { unsupported(w.at("type"), "Foo", "NFC, NFD"); }),
            "tokenizer file 't.json': key 'normalizer.type': 'Foo' is not supported (kktrain reads "
            "NFC, NFD)");
}

}  // namespace
}  // namespace kktrain
