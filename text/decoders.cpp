// The decoder steps over token strings, as the Rust library's Decoder::decode_chain of each.
#include <algorithm>

#include "core/errors.hpp"
#include "text/tokenizer_impl.hpp"

namespace kktrain::text {

namespace {

std::vector<std::string> byte_level(const std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& tok : tokens) {
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
  return {utf8_lossy(bytes)};
}

std::vector<std::string> byte_fallback(const std::vector<std::string>& tokens) {
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
  for (const std::string& tok : tokens) {
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
  return out;
}

}  // namespace

void apply_decoders(const Tokenizer::Impl& t, std::vector<std::string>* tokens) {
  std::vector<RegexMatcher> matchers;
  for (const DecoderStep& d : t.decoders) {
    switch (d.kind) {
      case DecoderStep::Kind::byte_level:
        *tokens = byte_level(*tokens);
        break;
      case DecoderStep::Kind::byte_fallback:
        *tokens = byte_fallback(*tokens);
        break;
      case DecoderStep::Kind::fuse: {
        std::string all;
        for (const std::string& s : *tokens) all += s;
        *tokens = {all};
        break;
      }
      case DecoderStep::Kind::metaspace:
        for (size_t i = 0; i < tokens->size(); ++i) {
          std::string& s = (*tokens)[i];
          std::string o;
          for (size_t k = 0; k < s.size();) {
            if (s.compare(k, d.replacement.size(), d.replacement) == 0) {
              if (!(i == 0 && d.prepend != PrependScheme::never)) o.push_back(' ');
              k += d.replacement.size();
            } else {
              o.push_back(s[k++]);
            }
          }
          s = std::move(o);
        }
        break;
      case DecoderStep::Kind::strip:
        for (std::string& s : *tokens) {
          std::vector<std::pair<size_t, char32_t>> cps;  // (byte offset, code point)
          for (size_t k = 0; k < s.size();) {
            const CodePoint c = decode_at(s, k);
            cps.emplace_back(k, c.cp);
            k += size_t(c.len);
          }
          size_t start = 0, stop = cps.size();
          for (size_t k = 0;
               k < size_t(d.strip_start) && k < cps.size() && cps[k].second == d.strip_char; ++k)
            start = k + 1;
          for (size_t k = 0; k < size_t(d.strip_stop) && k < cps.size(); ++k) {
            const size_t idx = cps.size() - k - 1;
            if (cps[idx].second != d.strip_char) break;
            stop = idx;
          }
          if (stop < start) stop = start;
          const size_t b = start < cps.size() ? cps[start].first : s.size();
          const size_t e = stop < cps.size() ? cps[stop].first : s.size();
          s = s.substr(b, e - b);
        }
        break;
      case DecoderStep::Kind::replace:
        for (std::string& s : *tokens) {
          if (d.pattern.regex) {
            if (matchers.empty())
              for (const Regex* r : t.regexes) matchers.emplace_back(*r);
            std::vector<std::pair<size_t, size_t>> m;
            matchers[size_t(d.pattern.matcher)].find_all(&m, s);
            std::string o;
            size_t prev = 0;
            for (const auto& [b, e] : m) {
              o.append(s, prev, b - prev);
              o += d.content;
              prev = e;
            }
            o.append(s, prev, std::string::npos);
            s = std::move(o);
          } else if (!d.pattern.literal.empty()) {
            std::string o;
            size_t prev = 0;
            for (size_t at = s.find(d.pattern.literal); at != std::string::npos;
                 at = s.find(d.pattern.literal, prev)) {
              o.append(s, prev, at - prev);
              o += d.content;
              prev = at + d.pattern.literal.size();
            }
            o.append(s, prev, std::string::npos);
            s = std::move(o);
          }
        }
        break;
    }
  }
}

}  // namespace kktrain::text

namespace kktrain::text {

namespace {

// A literal or regex Replace of one string.
std::string replace_in(const Pattern& p, const std::string& content, const std::string& s,
                       std::vector<RegexMatcher>& matchers) {
  std::vector<std::pair<size_t, size_t>> m;
  if (p.regex) {
    matchers[size_t(p.matcher)].find_all(&m, s);
  } else if (!p.literal.empty()) {
    for (size_t at = s.find(p.literal); at != std::string::npos;
         at = s.find(p.literal, at + p.literal.size()))
      m.emplace_back(at, at + p.literal.size());
  }
  std::string o;
  size_t prev = 0;
  for (const auto& [b, e] : m) {
    o.append(s, prev, b - prev);
    o += content;
    prev = e;
  }
  o.append(s, prev, std::string::npos);
  return o;
}

}  // namespace

std::string token_source_bytes(const Tokenizer::Impl& t, int32_t id,
                               std::vector<RegexMatcher>& matchers) {
  const std::string_view tok = t.id_to_token[size_t(id)];
  const auto added = std::lower_bound(t.added.begin(), t.added.end(), id,
                                      [](const AddedToken& a, int32_t v) { return a.id < v; });
  if (added != t.added.end() && added->id == id) return added->content;
  if (t.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      if (t.byte_ids[size_t(b)] == id) return std::string(1, char(b));
    }
  }
  if (matchers.empty())
    for (const Regex* r : t.regexes) matchers.emplace_back(*r);
  std::string s(tok);
  for (const DecoderStep& d : t.decoders) {
    switch (d.kind) {
      case DecoderStep::Kind::byte_level: {
        std::string mapped;
        bool all = true;
        for (size_t i = 0; i < s.size() && all;) {
          const CodePoint c = decode_at(s, i);
          const int b = unicode_to_byte(c.cp);
          if (b < 0) all = false;
          mapped.push_back(char(b));
          i += size_t(c.len);
        }
        if (all) s = mapped;
        break;
      }
      case DecoderStep::Kind::metaspace:
        s = replace_in(Pattern{d.replacement, nullptr, -1}, " ", s, matchers);
        break;
      case DecoderStep::Kind::replace:
        s = replace_in(d.pattern, d.content, s, matchers);
        break;
      default:  // byte_fallback (done above), fuse, strip: joins and trims, not one token's bytes
        break;
    }
  }
  return s;
}

void segment_offsets(std::vector<ByteRange>* offsets, const Tokenizer::Impl& t,
                     std::vector<RegexMatcher>& matchers, const std::vector<int32_t>& out,
                     size_t first, std::string_view seg, size_t at) {
  std::string spelled;
  std::vector<size_t> ends;
  for (size_t k = first; k < out.size(); ++k) {
    spelled += token_source_bytes(t, out[k], matchers);
    ends.push_back(spelled.size());
  }
  size_t skip = 0;
  if (spelled.size() == seg.size() + 1 && spelled[0] == ' ') skip = 1;
  if (std::string_view(spelled).substr(skip) != seg) {
    throw InputError("the tokens of '" + t.path +
                     "' do not spell the text they came from (its normalizer changes it), so "
                     "they cannot be mapped back to the text's bytes");
  }
  size_t prev = 0;
  for (size_t e : ends) {
    const size_t b = prev > skip ? prev - skip : 0, en = e > skip ? e - skip : 0;
    offsets->push_back({at + b, at + en});
    prev = e;
  }
}

}  // namespace kktrain::text
