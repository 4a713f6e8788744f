// The post-processors (text/post_processors.hpp).
#include "text/post_processors.hpp"

#include <cstdint>

namespace kktrain::text {

std::unique_ptr<PostProcessor> PostProcessor::from_json(const std::string& type, const Json& j,
                                                        const Where& w,
                                                        std::vector<EmittedId>* emitted) {
  if (type == "ByteLevel") return std::make_unique<ByteLevelProcessor>();
  if (type == "TemplateProcessing") return TemplateProcessing::from_json(j, w, emitted);
  return nullptr;
}

std::unique_ptr<TemplateProcessing> TemplateProcessing::from_json(const Json& p, const Where& w,
                                                                  std::vector<EmittedId>* emitted) {
  auto t = std::make_unique<TemplateProcessing>();
  const Where ws = w.at("single");
  const Json& single = member(p, "single", w);
  if (!single.is_array()) ws.fail("expected a list");
  const Json& specials = member(p, "special_tokens", w);
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const Where wi = ws.at(i);
    if (const Json* st =
            single[i].is_object() ? optional_member(single[i], "SpecialToken") : nullptr) {
      const std::string name = as_string(member(*st, "id", wi.at("SpecialToken")), wi);
      const Json& entry = member(specials, name.c_str(), w.at("special_tokens"));
      const Json& ids = member(entry, "ids", w.at("special_tokens").at(name));
      if (!ids.is_array()) w.at("special_tokens").at(name).at("ids").fail("expected a list");
      for (size_t k = 0; k < ids.size(); ++k) {
        const Where wk = w.at("special_tokens").at(name).at("ids").at(k);
        const bool huge = ids[k].is_number_unsigned() && ids[k].get<uint64_t>() > INT64_MAX;
        const int64_t id = huge ? -1 : as_int(ids[k], wk);
        emitted->push_back({id, ids[k].dump(), wk});
        (seen_sequence ? t->suffix_ : t->prefix_).push_back(int32_t(id));
      }
    } else if (const Json* sq =
                   single[i].is_object() ? optional_member(single[i], "Sequence") : nullptr) {
      if (as_string(member(*sq, "id", wi.at("Sequence")), wi) != "A" || seen_sequence)
        wi.fail("the single template must hold sequence A once");
      seen_sequence = true;
    } else {
      wi.fail("expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!seen_sequence) ws.fail("the single template must hold sequence A");
  return t;
}

void TemplateProcessing::special_ids(std::vector<int32_t>* prefix,
                                     std::vector<int32_t>* suffix) const {
  prefix->insert(prefix->end(), prefix_.begin(), prefix_.end());
  suffix->insert(suffix->end(), suffix_.begin(), suffix_.end());
}

}  // namespace kktrain::text
