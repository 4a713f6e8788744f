// kktrain's chat-template renderer (text/jinja.hpp) for tests/cli/test_chat_templates.py.
//
//   render_chat < CASES.json
//       CASES: a JSON list of {"template": S, "messages": [...], "add_generation_prompt": B,
//       "special_tokens": {name: S}, "spans": B, "cost": B}; prints one JSON line per case, in
//       order: {"text": S} (with "spans": also "content_spans": [[message, begin, end, field,
//       offset], ...] (field "content" or "reasoning_content"; offset: where the span's bytes
//       start in that string) and "generation_spans": [[begin, end], ...], byte offsets; with
//       "cost": also "cost": {"steps", "loop_iterations", "output_bytes", "depth"}, what the
//       render cost against jinja::Limits) or {"error": S} (the InputError's message). Exit 0
//       unless stdin is not such a list (2).
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "text/jinja.hpp"

namespace jinja = kktrain::text::jinja;

int main() {
  const std::string input((std::istreambuf_iterator<char>(std::cin)), {});
  nlohmann::ordered_json cases;
  try {
    cases = nlohmann::ordered_json::parse(input);
  } catch (const std::exception& e) {
    std::cerr << "render_chat: stdin is not JSON: " << e.what() << "\n";
    return 2;
  }
  if (!cases.is_array()) return 2;
  for (const auto& c : cases) {
    nlohmann::ordered_json out;
    try {
      std::map<std::string, std::string> special;
      if (c.contains("special_tokens"))
        for (const auto& kv : c["special_tokens"].items()) special[kv.key()] = kv.value();
      const jinja::Template tmpl(c.at("template").get<std::string>());
      const auto prompt = c.value("add_generation_prompt", false) ? jinja::GenerationPrompt::yes
                                                                  : jinja::GenerationPrompt::no;
      const auto messages = jinja::parse_json(c.at("messages").dump(), "messages");
      const auto r = jinja::render_chat(tmpl, messages, prompt, special);
      out["text"] = r.text;
      if (c.value("spans", false)) {
        out["content_spans"] = nlohmann::ordered_json::array();
        for (const auto& s : r.content_spans)
          out["content_spans"].push_back(
              {s.message, s.begin, s.end,
               s.field == jinja::ContentField::content ? "content" : "reasoning_content",
               s.offset});
        out["generation_spans"] = nlohmann::ordered_json::array();
        for (const auto& s : r.generation_spans)
          out["generation_spans"].push_back({s.first, s.second});
      }
      if (c.value("cost", false))
        out["cost"] = {{"steps", r.cost.steps},
                       {"loop_iterations", r.cost.loop_iterations},
                       {"output_bytes", r.cost.output_bytes},
                       {"depth", r.cost.max_depth}};
    } catch (const kktrain::InputError& e) {
      out["error"] = e.what();
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
