// The decoders (text/decoders.hpp).
#include "text/decoders.hpp"

#include <cctype>
#include <cstdio>

namespace kktrain::text {

std::unique_ptr<Decoder> Decoder::from_json(const std::string& type, const Json& j, const Where& w,
                                            Regexes* regexes) {
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") return MetaspaceDecoder::from_json(j, w);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return StripDecoder::from_json(j, w);
  if (type == "Replace") return ReplaceDecoder::from_json(j, w, regexes);
  return nullptr;
}

void decode_tokens(const std::vector<std::unique_ptr<Decoder>>& steps, const Regexes& regexes,
                   std::vector<std::string>* tokens) {
  LazyMatchers matchers(regexes);
  for (const auto& step : steps) step->decode_chain(tokens, matchers);
}

// ---- ByteLevel -------------------------------------------------------------------------------
void ByteLevelDecoder::decode_chain(std::vector<std::string>* tokens, LazyMatchers&) const {
  std::string bytes;
  for (const std::string& tok : *tokens) {
    std::string mapped;
    bool all = true;
    for (size_t i = 0; i < tok.size() && all;) {
      const CodePoint c = decode_at(tok, i);
      const int b = unicode_to_byte(c.cp);
      if (b < 0)
        all = false;
      else
        mapped.push_back(char(b));
      i += size_t(c.len);
    }
    bytes += all ? mapped : tok;  // a token outside the alphabet stays as its bytes
  }
  *tokens = {utf8_lossy(bytes)};
}

// ---- Metaspace -------------------------------------------------------------------------------
std::unique_ptr<MetaspaceDecoder> MetaspaceDecoder::from_json(const Json& j, const Where& w) {
  auto d = std::make_unique<MetaspaceDecoder>();
  d->replacement_ = one_char(member(j, "replacement", w), w.at("replacement"));
  d->prepend_ = read_prepend(j, w);
  return d;
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>* tokens, LazyMatchers&) const {
  for (size_t i = 0; i < tokens->size(); ++i) {
    std::string& s = (*tokens)[i];
    std::string o;
    for (size_t k = 0; k < s.size();) {
      if (s.compare(k, replacement_.size(), replacement_) == 0) {
        if (!(i == 0 && prepend_ != PrependScheme::never)) o.push_back(' ');
        k += replacement_.size();
      } else {
        o.push_back(s[k++]);
      }
    }
    s = std::move(o);
  }
}

// ---- ByteFallback ----------------------------------------------------------------------------
void ByteFallbackDecoder::decode_chain(std::vector<std::string>* tokens, LazyMatchers&) const {
  std::vector<std::string> out;
  std::string pending;  // consecutive <0xXX> bytes
  auto flush = [&] {
    if (pending.empty()) return;
    if (first_invalid_utf8(pending) < 0) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    pending.clear();
  };
  for (const std::string& tok : *tokens) {
    unsigned v = 0;
    const bool is_byte = tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>' &&
                         std::isxdigit(uint8_t(tok[3])) && std::isxdigit(uint8_t(tok[4])) &&
                         std::sscanf(tok.c_str() + 3, "%2x", &v) == 1;
    if (is_byte) {
      pending.push_back(char(v));
    } else {
      flush();
      out.push_back(tok);
    }
  }
  flush();
  *tokens = std::move(out);
}

// ---- Fuse ------------------------------------------------------------------------------------
void FuseDecoder::decode_chain(std::vector<std::string>* tokens, LazyMatchers&) const {
  std::string all;
  for (const std::string& s : *tokens) all += s;
  *tokens = {all};
}

// ---- Strip -----------------------------------------------------------------------------------
std::unique_ptr<StripDecoder> StripDecoder::from_json(const Json& j, const Where& w) {
  auto d = std::make_unique<StripDecoder>();
  const std::string c = one_char(member(j, "content", w), w.at("content"));
  d->strip_char_ = decode_at(c, 0).cp;
  d->start_ = int(as_int(member(j, "start", w), w.at("start")));
  d->stop_ = int(as_int(member(j, "stop", w), w.at("stop")));
  if (d->start_ < 0 || d->stop_ < 0) w.fail("start and stop must be >= 0");
  return d;
}

void StripDecoder::decode_chain(std::vector<std::string>* tokens, LazyMatchers&) const {
  for (std::string& s : *tokens) {
    std::vector<std::pair<size_t, char32_t>> cps;  // (byte offset, code point)
    for (size_t k = 0; k < s.size();) {
      const CodePoint c = decode_at(s, k);
      cps.emplace_back(k, c.cp);
      k += size_t(c.len);
    }
    size_t start = 0, stop = cps.size();
    for (size_t k = 0; k < size_t(start_) && k < cps.size() && cps[k].second == strip_char_; ++k)
      start = k + 1;
    for (size_t k = 0; k < size_t(stop_) && k < cps.size(); ++k) {
      const size_t idx = cps.size() - k - 1;
      if (cps[idx].second != strip_char_) break;
      stop = idx;
    }
    if (stop < start) stop = start;
    const size_t b = start < cps.size() ? cps[start].first : s.size();
    const size_t e = stop < cps.size() ? cps[stop].first : s.size();
    s = s.substr(b, e - b);
  }
}

// ---- Replace ---------------------------------------------------------------------------------
std::unique_ptr<ReplaceDecoder> ReplaceDecoder::from_json(const Json& j, const Where& w,
                                                          Regexes* regexes) {
  auto d = std::make_unique<ReplaceDecoder>();
  d->rule_ = Replacement::from_json(j, w, regexes);
  return d;
}

void ReplaceDecoder::decode_chain(std::vector<std::string>* tokens, LazyMatchers& matchers) const {
  Matches m;
  for (std::string& s : *tokens) {
    if (rule_.pattern.regex) {
      rule_.pattern.find(&m, s, matchers.get());
    } else {
      std::vector<RegexMatcher> none;
      rule_.pattern.find(&m, s, none);
    }
    if (!m.empty()) s = replace_all(s, m, rule_.content);
  }
}

}  // namespace kktrain::text
