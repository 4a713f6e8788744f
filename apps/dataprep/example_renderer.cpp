// Examples as the trainer sees them: the contract is in apps/dataprep/example_renderer.hpp.
#include "apps/dataprep/example_renderer.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "apps/dataprep/chat_template_file.hpp"
#include "apps/dataprep/text_model.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_text.hpp"
#include "text/jinja.hpp"

namespace kktrain {

namespace jinja = text::jinja;
using jinja::Value;

struct ExampleRenderer::State {
  ExampleFormat format = ExampleFormat::chat;
  LossOn loss_on = LossOn::assistant;
  Truncation truncation = Truncation::truncate;
  int64_t seq_len = 0;
  bool share_prompt = false;
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::unique_ptr<jinja::Template> tmpl;  // null: no template (prompt_completion only)
  std::string template_source;
  std::map<std::string, std::string> special_tokens;
  std::mutex pool_mutex;
  std::vector<std::unique_ptr<text::Encoder>> pool;  // idle encoders
  std::atomic<int64_t> truncated{0}, dropped{0}, empty{0};
};

namespace {

using State = ExampleRenderer::State;

// An encoder of the pool for the length of one call.
class EncoderLease {
 public:
  explicit EncoderLease(State& s) : s_(s) {
    std::lock_guard<std::mutex> lock(s_.pool_mutex);
    if (s_.pool.empty()) {
      enc_ = std::make_unique<text::Encoder>(s_.tokenizer);
    } else {
      enc_ = std::move(s_.pool.back());
      s_.pool.pop_back();
    }
  }
  ~EncoderLease() {
    std::lock_guard<std::mutex> lock(s_.pool_mutex);
    s_.pool.push_back(std::move(enc_));
  }
  text::Encoder& operator*() { return *enc_; }

 private:
  State& s_;
  std::unique_ptr<text::Encoder> enc_;
};

// The template of the run (the order of the header), or none.
void load_template(State* s, const Config& cfg) {
  std::optional<ChatTemplateText> t =
      find_chat_template(*s->tokenizer, "data.chat_template", cfg.data.chat_template);
  if (!t) {
    if (s->format == ExampleFormat::chat) {
      throw InputError(
          "data.format: chat renders conversations with the model's chat template, and the "
          "tokenizer '" +
          s->tokenizer->path() +
          "' has none (no chat_template.jinja beside it, no chat_template in "
          "tokenizer_config.json): set data.chat_template: FILE");
    }
    return;
  }
  s->template_source = t->source;
  s->tmpl = std::make_unique<jinja::Template>(t->text, t->source);
}

// s with its control characters escaped (\n, \t, \r, \xNN): part of a one-line message.
std::string escaped(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\n') {
      o += "\\n";
    } else if (c == '\t') {
      o += "\\t";
    } else if (c == '\r') {
      o += "\\r";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

bool all_whitespace(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

// The first token whose bytes end after byte b (tokens' offsets are in order: begins and ends
// non-decreasing), found by bisection.
size_t first_ending_after(const std::vector<text::ByteRange>& off, size_t b) {
  return static_cast<size_t>(
      std::partition_point(off.begin(), off.end(),
                           [b](const text::ByteRange& r) { return r.end <= b; }) -
      off.begin());
}

// Sets mask[k] for every token k holding some byte of [b, e) (none when b == e): O(log n + the
// tokens marked).
void mark_overlap(std::vector<uint8_t>* mask, const std::vector<text::ByteRange>& off, size_t b,
                  size_t e) {
  if (b >= e) return;
  for (size_t k = first_ending_after(off, b); k < off.size() && off[k].begin < e; ++k) {
    if (off[k].end > b) (*mask)[k] = 1;
  }
}

// A tokenized text and where each token came from.
struct Tokens {
  std::vector<int32_t> ids;
  std::vector<text::ByteRange> off;
};

const Value* field(const Value& dict, const char* key) {
  return dict.is_dict() ? dict.find(key) : nullptr;
}

// The loss tokens of assistant message `m` (0-based index into the messages; `spans` its content
// spans, non-empty): its content's tokens, then its end of turn. Throws InputError (`where`
// first) when no special token closes it.
void mark_assistant_turn(std::vector<uint8_t>* mask, const State& s, const std::string& text,
                         const Tokens& t, const std::vector<jinja::ContentSpan>& spans, size_t m,
                         const std::string& where) {
  size_t end = 0;
  for (const auto& sp : spans) {
    mark_overlap(mask, t.off, sp.begin, sp.end);
    end = std::max(end, sp.end);
  }
  size_t k = static_cast<size_t>(
      std::partition_point(t.off.begin(), t.off.end(),
                           [end](const text::ByteRange& r) { return r.begin < end; }) -
      t.off.begin());
  const size_t first = k;
  for (; k < t.ids.size(); ++k) {
    if (s.tokenizer->is_special(t.ids[k])) {
      for (size_t j = first; j <= k; ++j) (*mask)[j] = 1;
      return;
    }
    const auto& o = t.off[k];
    if (!all_whitespace(std::string_view(text).substr(o.begin, o.end - o.begin))) break;
  }
  const std::string after = escaped(text.substr(end, 40));
  throw InputError(where + "assistant message " + std::to_string(m + 1) +
                   ": no special token of the tokenizer ends its turn (the chat template (" +
                   s.template_source + ") follows its content with '" + after +
                   "'), so its end-of-turn tokens cannot be isolated");
}

// The loss mask of a rendered conversation (loss_on assistant or completion).
// Messages before `first` (a preference pair's prompt) are not marked.
void mark_assistant(std::vector<uint8_t>* mask, const State& s, const jinja::RenderedChat& rc,
                    const Value& messages, const Tokens& t, const std::string& where,
                    size_t first = 0) {
  if (!rc.generation_spans.empty()) {
    for (const auto& g : rc.generation_spans) mark_overlap(mask, t.off, g.first, g.second);
    return;
  }
  // Each message's content spans, grouped in one pass (linear in the turns).
  const std::vector<Value>& turns = messages.items();
  std::vector<std::vector<jinja::ContentSpan>> by_message(turns.size());
  for (const auto& sp : rc.content_spans) {
    if (sp.message < by_message.size()) by_message[sp.message].push_back(sp);
  }
  for (size_t m = first; m < turns.size(); ++m) {
    const Value& msg = turns[m];
    const Value* role = field(msg, "role");
    const Value* content = field(msg, "content");
    if (!role || role->str() != "assistant" || !content || !content->is_string()) continue;
    // its content's and reasoning_content's spans: the content must be printed (its bytes kept
    // by the origin rule, text/jinja.hpp Value::origins), the reasoning where the template
    // prints it (Qwen3's drops it from earlier turns)
    const std::vector<jinja::ContentSpan>& spans = by_message[m];
    const bool content_printed = std::any_of(
        spans.begin(), spans.end(),
        [](const jinja::ContentSpan& sp) { return sp.field == jinja::ContentField::content; });
    if (spans.empty() && content->str().empty()) continue;  // nothing printed to find it by
    if (!content_printed && !content->str().empty()) {
      throw InputError(where + "assistant message " + std::to_string(m + 1) +
                       ": the chat template (" + s.template_source +
                       ") does not print its content as it is (only through operations that "
                       "lose where it came from, or not at all), so its tokens cannot be "
                       "isolated for data.loss_on: assistant");
    }
    mark_assistant_turn(mask, s, rc.text, t, spans, m, where);
  }
}

Tokens tokenize(State& s, const std::string& text, text::SpecialTokens special,
                const std::string& where) {
  Tokens t;
  EncoderLease enc(s);
  try {
    (*enc).encode_with_offsets(&t.ids, &t.off, text, special);
  } catch (const InputError& e) {
    throw InputError(where + "the rendered text: " + e.what());
  }
  return t;
}

// A conversation rendered, tokenized and masked (before truncation). `prompt_messages` > 0 (a
// preference pair's side): the first messages are the prompt, and only tokens starting after the
// prompt's own rendering with the generation prompt, which the text must begin with, count.
RenderedExample render_messages(State& s, const Value& messages, const std::string& where,
                                size_t prompt_messages = 0) {
  RenderedExample ex;
  jinja::RenderedChat rc;
  try {
    rc = jinja::render_chat(*s.tmpl, messages, jinja::GenerationPrompt::no, s.special_tokens);
  } catch (const InputError& e) {
    throw InputError(where + e.what());
  }
  Tokens t = tokenize(s, rc.text, text::SpecialTokens::none, where);
  ex.loss_mask.assign(t.ids.size(), 0);
  if (s.loss_on == LossOn::all) {
    std::fill(ex.loss_mask.begin(), ex.loss_mask.end(), 1);
  } else {
    mark_assistant(&ex.loss_mask, s, rc, messages, t, where, prompt_messages);
  }
  if (prompt_messages > 0) {
    const std::vector<Value>& all = messages.items();
    const Value prompt = Value::make_list(std::vector<Value>(
        all.begin(), all.begin() + static_cast<std::ptrdiff_t>(prompt_messages)));
    std::string prompt_text;
    try {
      prompt_text =
          jinja::render_chat(*s.tmpl, prompt, jinja::GenerationPrompt::yes, s.special_tokens).text;
    } catch (const InputError& e) {
      throw InputError(where + "the prompt with the generation prompt: " + e.what());
    }
    if (rc.text.compare(0, prompt_text.size(), prompt_text) != 0) {
      throw InputError(
          where + "the chat template (" + s.template_source +
          ") renders the prompt with its generation prompt as '" +
          escaped(prompt_text.substr(prompt_text.size() > 60 ? prompt_text.size() - 60 : 0)) +
          "', which the conversation with the reply does not begin with, so the "
          "reply's tokens cannot be told from the prompt's");
    }
    for (size_t k = 0; k < t.ids.size() && t.off[k].begin < prompt_text.size(); ++k) {
      ex.loss_mask[k] = 0;
    }
  }
  ex.text = std::move(rc.text);
  ex.ids = std::move(t.ids);
  return ex;
}

// prompt + completion without a template: the tokenizer's special tokens, then its eos token.
RenderedExample render_plain(State& s, const std::string& prompt, const std::string& completion,
                             const std::string& where) {
  RenderedExample ex;
  ex.text = prompt + completion;
  Tokens t = tokenize(s, ex.text, text::SpecialTokens::add, where);
  ex.loss_mask.assign(t.ids.size(), 0);
  mark_overlap(&ex.loss_mask, t.off, prompt.size(), ex.text.size());
  if (s.loss_on == LossOn::all) std::fill(ex.loss_mask.begin(), ex.loss_mask.end(), 1);
  if (const auto eos = s.tokenizer->eos_id()) {
    t.ids.push_back(*eos);
    ex.loss_mask.push_back(1);
    ex.text += std::string(s.tokenizer->id_to_token(*eos));
  }
  ex.ids = std::move(t.ids);
  return ex;
}

Value message(const std::string& role, const std::string& content) {
  jinja::Dict d;
  d.set("role", Value::string(role));
  d.set("content", Value::string(content));
  return Value::make_dict(std::move(d));
}

// What a JSON value is, in words ("a number", "an object", ...).
std::string json_kind(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::boolean:
      return "a boolean";
    case Value::Kind::integer:
    case Value::Kind::number:
      return "a number";
    case Value::Kind::list:
      return "a list";
    case Value::Kind::dict:
      return "an object";
    default:
      return "a " + std::string(v.is_string() ? "string" : "null");
  }
}

// The "messages" of a chat line, checked.
Value chat_messages(const Value& obj, const std::string& where) {
  const Value* messages = field(obj, "messages");
  if (!messages || messages->kind() != Value::Kind::list) {
    throw InputError(where +
                     "no \"messages\" list (data.format: chat reads {\"messages\": "
                     "[{\"role\": ..., \"content\": ...}, ...]} per line)");
  }
  if (messages->items().empty()) throw InputError(where + "\"messages\" is empty");
  for (size_t m = 0; m < messages->items().size(); ++m) {
    const Value& msg = messages->items()[m];
    const std::string n = "message " + std::to_string(m + 1);
    if (!msg.is_dict()) throw InputError(where + n + " is not an object");
    const Value* role = field(msg, "role");
    if (!role || role->kind() != Value::Kind::string)
      throw InputError(where + n + " has no \"role\" string");
    const Value* content = field(msg, "content");
    if (!content || content->kind() != Value::Kind::string)
      throw InputError(where + n + " (" + role->str() + ") has no \"content\" string");
    const Value* reasoning = field(msg, "reasoning_content");  // optional; null: absent
    if (reasoning && !reasoning->is_string() && !reasoning->is_none())
      throw InputError(where + n + " (" + role->str() + "): \"reasoning_content\" is " +
                       json_kind(*reasoning) +
                       ", not a string (the reasoning's text; null or absent without one)");
  }
  return *messages;
}

std::string string_field(const Value& obj, const char* key, const std::string& where) {
  const Value* v = field(obj, key);
  if (!v || v->kind() != Value::Kind::string) {
    throw InputError(where + "no \"" + key +
                     "\" string (data.format: prompt_completion reads {\"prompt\": ..., "
                     "\"completion\": ...} per line)");
  }
  return v->str();
}

// A list of messages checked as chat_messages checks "messages" (`what` names the field).
Value message_list(const Value& v, const std::string& what, const std::string& where) {
  jinja::Dict d;
  d.set("messages", v);
  try {
    return chat_messages(Value::make_dict(std::move(d)), where + what + ": ");
  } catch (const InputError& e) {
    std::string m = e.what();
    const std::string tag = "no \"messages\" list";
    if (m.find(tag) != std::string::npos) {
      throw InputError(where + "\"" + what + "\" is " + json_kind(v) + ", not a list of messages");
    }
    if (m.find("\"messages\" is empty") != std::string::npos) {
      throw InputError(where + "\"" + what + "\" is an empty list");
    }
    throw;
  }
}

// A side's reply (messages [from, end) of `conv`): assistant messages only, some content.
void check_reply(const Value& conv, size_t from, const std::string& side,
                 const std::string& where) {
  const std::vector<Value>& m = conv.items();
  if (from >= m.size()) {
    throw InputError(where + "the " + side + " completion is empty (no message after the prompt)");
  }
  bool any = false;
  for (size_t i = from; i < m.size(); ++i) {
    const std::string role = field(m[i], "role")->str();
    if (role != "assistant") {
      throw InputError(where + "the " + side + " completion's message " +
                       std::to_string(i - from + 1) + " is the " + role +
                       "'s; a completion is the assistant's reply");
    }
    if (!field(m[i], "content")->str().empty()) any = true;
  }
  if (!any) throw InputError(where + "the " + side + " completion is empty");
}

// Whether two JSON values are the same (every key, in any order, and value).
bool same_json(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::boolean:
      return a.as_bool() == b.as_bool();
    case Value::Kind::integer:
      return a.as_int() == b.as_int();
    case Value::Kind::number:
      return a.as_float() == b.as_float();
    case Value::Kind::string:
      return a.str() == b.str();
    case Value::Kind::list: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!same_json(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case Value::Kind::dict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* w = b.find(k);
        if (!w || !same_json(v, *w)) return false;
      }
      return true;
    }
    default:
      return true;  // null
  }
}
bool same_message(const Value& a, const Value& b) {
  return same_json(a, b);
}

// A pair's side: prompt + reply.
RenderedExample render_side(State& s, const Value& prompt, const Value& reply,
                            const std::string& where) {
  std::vector<Value> conv = prompt.items();
  for (const Value& m : reply.items()) conv.push_back(m);
  return render_messages(s, Value::make_list(std::move(conv)), where, prompt.items().size());
}

// The two sides of a preference line (before truncation).
std::pair<RenderedExample, RenderedExample> render_sides(State& s, const Value& obj,
                                                         const std::string& where) {
  const Value* chosen = field(obj, "chosen");
  const Value* rejected = field(obj, "rejected");
  const Value* prompt = field(obj, "prompt");
  const std::string form =
      " (data.format: preference reads {\"prompt\": ..., \"chosen\": ..., \"rejected\": ...} "
      "per line: strings, or lists of messages)";
  if (!chosen || !rejected) {
    throw InputError(where + "no \"" + (chosen ? "rejected" : "chosen") + "\"" + form);
  }
  if (chosen->is_string() && rejected->is_string()) {  // strings
    if (!prompt || !prompt->is_string()) {
      throw InputError(
          where +
          (prompt ? "\"prompt\" is " + json_kind(*prompt) + " while the completions are strings"
                  : std::string("no \"prompt\" string")) +
          form);
    }
    for (const auto* side : {chosen, rejected}) {
      if (side->str().empty()) {
        throw InputError(where + "the " + (side == chosen ? "chosen" : "rejected") +
                         " completion is empty");
      }
    }
    if (!s.tmpl) {
      return {render_plain(s, prompt->str(), chosen->str(), where),
              render_plain(s, prompt->str(), rejected->str(), where)};
    }
    const Value p = Value::make_list({message("user", prompt->str())});
    return {render_side(s, p, Value::make_list({message("assistant", chosen->str())}), where),
            render_side(s, p, Value::make_list({message("assistant", rejected->str())}), where)};
  }
  if (chosen->is_string() != rejected->is_string()) {
    throw InputError(where + "\"chosen\" is " + json_kind(*chosen) + " and \"rejected\" is " +
                     json_kind(*rejected) + "; both strings or both lists of messages" + form);
  }
  if (!s.tmpl) {
    throw InputError(where +
                     "conversations render with the model's chat template, and the tokenizer '" +
                     s.tokenizer->path() + "' has none: set data.chat_template: FILE");
  }
  const Value c = message_list(*chosen, "chosen", where);
  const Value r = message_list(*rejected, "rejected", where);
  if (prompt) {  // explicit: the prompt's messages, then each reply
    if (prompt->is_string()) {
      throw InputError(where +
                       "\"prompt\" is a string while the completions are lists of "
                       "messages; give the prompt as a list of messages" +
                       form);
    }
    const Value p = message_list(*prompt, "prompt", where);
    check_reply(c, 0, "chosen", where);
    check_reply(r, 0, "rejected", where);
    return {render_side(s, p, c, where), render_side(s, p, r, where)};
  }
  // implicit: the shared opening messages are the prompt
  size_t k = 0;
  while (k < c.items().size() && k < r.items().size() && same_message(c.items()[k], r.items()[k])) {
    ++k;
  }
  if (k == 0) {
    throw InputError(where +
                     "the chosen and rejected conversations share no opening message, so their "
                     "prompts differ (without \"prompt\", the shared opening is the prompt)");
  }
  const std::vector<Value>& cm = c.items();
  const Value p =
      Value::make_list(std::vector<Value>(cm.begin(), cm.begin() + static_cast<std::ptrdiff_t>(k)));
  check_reply(c, k, "chosen", where);
  check_reply(r, k, "rejected", where);
  const Value creply =
      Value::make_list(std::vector<Value>(cm.begin() + static_cast<std::ptrdiff_t>(k), cm.end()));
  const std::vector<Value>& rm = r.items();
  const Value rreply =
      Value::make_list(std::vector<Value>(rm.begin() + static_cast<std::ptrdiff_t>(k), rm.end()));
  return {render_side(s, p, creply, where), render_side(s, p, rreply, where)};
}

// The example before truncation.
RenderedExample render_object(State& s, const Value& obj, const std::string& where) {
  if (s.format == ExampleFormat::chat) return render_messages(s, chat_messages(obj, where), where);
  const std::string prompt = string_field(obj, "prompt", where);
  const std::string completion = string_field(obj, "completion", where);
  if (!s.tmpl) return render_plain(s, prompt, completion, where);
  return render_messages(
      s, Value::make_list({message("user", prompt), message("assistant", completion)}), where);
}

// Checks the template on a probe conversation (with a system message, then without one should
// the template refuse it): it renders, and each assistant turn's tokens can be isolated.
void probe(State& s) {
  const std::vector<Value> turns = {
      message("user", "Hello, who are you?"), message("assistant", "I am the probe's answer."),
      message("user", "Say it again."), message("assistant", "Again: the probe's answer.")};
  std::vector<Value> with_system = turns;
  with_system.insert(with_system.begin(), message("system", "You are a probe."));
  const std::string where = "checking the chat template on a probe ";
  try {
    render_messages(s, Value::make_list(with_system), where + "with a system message: ");
    return;
  } catch (const InputError&) {
  }
  const Value plain = Value::make_list(turns);
  try {
    jinja::render_chat(*s.tmpl, plain, jinja::GenerationPrompt::no, s.special_tokens);
  } catch (const InputError& e) {
    throw InputError(where + "conversation: " + e.what());
  }
  render_messages(s, plain, where + "conversation: ");
}

// Cuts a side to its first n tokens.
void cut(RenderedExample* side, int64_t n) {
  if (static_cast<int64_t>(side->ids.size()) <= n) return;
  side->ids.resize(static_cast<size_t>(n));
  side->loss_mask.resize(static_cast<size_t>(n));
}

int64_t loss_count(const RenderedExample& side) {
  return std::count(side.loss_mask.begin(), side.loss_mask.end(), uint8_t(1));
}

// The tokens two sides may hold once: their common run before the position that predicts
// either's first completion token.
int64_t shared_tokens(const RenderedExample& c, const RenderedExample& r) {
  auto first_loss = [](const RenderedExample& x) {
    const auto it = std::find(x.loss_mask.begin() + 1, x.loss_mask.end(), uint8_t(1));
    return static_cast<int64_t>(it - x.loss_mask.begin());
  };
  const int64_t limit = std::min(first_loss(c), first_loss(r)) - 1;
  int64_t k = 0;
  while (k < limit && c.ids[static_cast<size_t>(k)] == r.ids[static_cast<size_t>(k)]) ++k;
  return k;
}

// A preference line -> its pair (the header's truncation and sharing rules).
RenderedExample render_pair(State& s, const Value& obj, const std::string& where) {
  auto [c, r] = render_sides(s, obj, where);
  for (RenderedExample* side : {&c, &r}) {
    const char* name = side == &c ? "chosen" : "rejected";
    if (side->ids.empty()) {
      throw InputError(where + "the " + name + " side renders to no tokens");
    }
    side->loss_mask[0] = 0;
    if (loss_count(*side) == 0) {
      throw InputError(where + "the " + name +
                       " side has no completion tokens to score (its reply renders to none)");
    }
  }
  RenderedExample ex;
  ex.full_tokens = static_cast<int64_t>(c.ids.size() + r.ids.size());
  ex.full_loss_tokens = loss_count(c) + loss_count(r);
  int64_t shared = s.share_prompt ? shared_tokens(c, r) : 0;
  if (ex.full_tokens - shared > s.seq_len) {
    const std::string sizes = std::to_string(c.ids.size()) + " + " + std::to_string(r.ids.size());
    switch (s.truncation) {
      case Truncation::error:
        throw InputError(where + "the pair is " + sizes + " tokens, longer than data.seq_len " +
                         std::to_string(s.seq_len) +
                         " (a pair's two sides share a row; data.truncation: error; truncate or "
                         "drop would keep going)");
      case Truncation::drop:
        ex.fate = ExampleFate::dropped;
        ++s.dropped;
        return ex;
      case Truncation::truncate:
        cut(&c, s.seq_len / 2);
        cut(&r, s.seq_len / 2);
        if (c.ids.empty() || r.ids.empty() || loss_count(c) == 0 || loss_count(r) == 0) {
          ex.fate = ExampleFate::dropped;  // a prompt of half a row or more leaves no reply
          ++s.dropped;
          return ex;
        }
        ex.fate = ExampleFate::truncated;
        ++s.truncated;
        shared = s.share_prompt ? shared_tokens(c, r) : 0;
        break;
    }
  }
  const auto sh = static_cast<std::ptrdiff_t>(shared);
  ex.shared = shared;
  ex.rejected_begin = static_cast<int64_t>(c.ids.size());
  ex.text = std::move(c.text);
  ex.rejected_text = std::move(r.text);
  ex.ids = std::move(c.ids);
  ex.ids.insert(ex.ids.end(), r.ids.begin() + sh, r.ids.end());
  ex.loss_mask = std::move(c.loss_mask);
  if (shared > 0) ex.loss_mask[static_cast<size_t>(shared)] = kSharedPromptMark;
  r.loss_mask[static_cast<size_t>(shared)] = kSideStart;
  ex.loss_mask.insert(ex.loss_mask.end(), r.loss_mask.begin() + sh, r.loss_mask.end());
  return ex;
}

}  // namespace

bool shares_prompt(const Config& cfg) {
  return is_preference(cfg.data) && cfg.data.share_prompt && cfg.model.sliding_window <= 0 &&
         cfg.model.attn_logit_softcapping <= 0;
}

ExampleRenderer ExampleRenderer::open(const Config& cfg, const ModelText& t) {
  auto s = std::make_shared<State>();
  const DataConfig& d = cfg.data;
  if (!is_examples(d)) {
    throw InputError("data.format: " + std::string(data_format_name(d.format)) +
                     " is not examples data (data.format chat or prompt_completion)");
  }
  s->format = d.format == DataFormat::chat         ? ExampleFormat::chat
              : d.format == DataFormat::preference ? ExampleFormat::preference
                                                   : ExampleFormat::prompt_completion;
  s->loss_on = d.loss_on;
  s->truncation = d.truncation;
  s->seq_len = d.seq_len;
  s->share_prompt = shares_prompt(cfg);
  if (t.vocab != TextVocab::tokenizer) {
    const std::string has = t.vocab == TextVocab::bytes
                                ? " reads text as bytes (kktrain's byte-level vocabulary, without "
                                  "special tokens to end a turn)"
                                : " has no tokenizer (" + t.why + ")";
    throw InputError("data.format: " + std::string(data_format_name(d.format)) +
                     " reads examples through the model's tokenizer and chat template, and " +
                     t.model + has + ": set model.tokenizer: PATH (a tokenizer.json)");
  }
  s->tokenizer = load_model_tokenizer(t);
  s->special_tokens = s->tokenizer->config().special_tokens;
  load_template(s.get(), cfg);
  if (s->tmpl && s->loss_on != LossOn::all) probe(*s);
  ExampleRenderer r;
  r.s_ = std::move(s);
  return r;
}

RenderedExample ExampleRenderer::render(std::string_view line, const std::string& file,
                                        int64_t line_no) const {
  const std::string where = file + ":" + std::to_string(line_no) + ": ";
  if (static_cast<int64_t>(line.size()) > kMaxExampleLineBytes) {
    throw InputError(where + "the line is longer than " +
                     std::to_string(kMaxExampleLineBytes >> 20) +
                     " MiB, the limit of an example line (rendering takes tens of times a line's "
                     "size in memory); split the example or shorten it");
  }
  Value obj;
  try {
    check_json_nesting(line, file + ":" + std::to_string(line_no));  // before any recursion
    obj = jinja::parse_json(std::string(line), file + ":" + std::to_string(line_no));
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (one JSON object per line)");
  }
  if (!obj.is_dict()) throw InputError(where + "not a JSON object");
  if (s_->format == ExampleFormat::preference) return render_pair(*s_, obj, where);
  RenderedExample ex = render_object(*s_, obj, where);
  if (ex.ids.empty()) {
    if (s_->truncation == Truncation::error) {
      throw InputError(
          where + "the example renders to no tokens (" +
          (s_->tmpl ? "the chat template (" + s_->template_source + ") prints nothing for it"
                    : std::string("an empty prompt and completion, and the "
                                  "tokenizer adds no token")) +
          "; data.truncation: error; truncate or drop would skip it)");
    }
    ex.loss_mask.clear();
    ex.fate = ExampleFate::empty;
    ++s_->empty;
    return ex;
  }
  ex.loss_mask[0] = 0;
  ex.full_tokens = int64_t(ex.ids.size());
  ex.full_loss_tokens = std::count(ex.loss_mask.begin(), ex.loss_mask.end(), uint8_t(1));
  if (ex.full_tokens <= s_->seq_len) return ex;
  switch (s_->truncation) {
    case Truncation::error:
      throw InputError(where + "the example is " + std::to_string(ex.full_tokens) +
                       " tokens, longer than data.seq_len " + std::to_string(s_->seq_len) +
                       " (data.truncation: error; truncate or drop would keep going)");
    case Truncation::drop:
      ex.ids.clear();
      ex.loss_mask.clear();
      ex.fate = ExampleFate::dropped;
      ++s_->dropped;
      return ex;
    case Truncation::truncate:
      ex.ids.resize(size_t(s_->seq_len));
      ex.loss_mask.resize(size_t(s_->seq_len));
      ex.fate = ExampleFate::truncated;
      ++s_->truncated;
      return ex;
  }
  return ex;
}

const text::Tokenizer& ExampleRenderer::tokenizer() const {
  return *s_->tokenizer;
}
const std::string& ExampleRenderer::template_source() const {
  return s_->template_source;
}
int64_t ExampleRenderer::truncated() const {
  return s_->truncated.load();
}
int64_t ExampleRenderer::dropped() const {
  return s_->dropped.load();
}
int64_t ExampleRenderer::empty() const {
  return s_->empty.load();
}

}  // namespace kktrain
