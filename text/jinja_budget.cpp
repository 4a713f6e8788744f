// The chat-template evaluator's budget (text/jinja_eval.hpp, Limits in text/jinja.hpp): steps,
// loop iterations, evaluation depth, the size of strings and of the output, the depth of values;
// each overrun one InputError naming the template, the line and the limit.
#include <algorithm>

#include "core/errors.hpp"
#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;

void Evaluator::spend(std::int64_t steps, int line) {
  steps_ += steps;
  if (steps_ > limits_.max_steps)
    fail(name_, line,
         "more than " + std::to_string(limits_.max_steps) +
             " evaluation steps in one render (the step limit)");
}

void Evaluator::spend_items(const std::vector<Value>& items, int line) {
  std::int64_t n = 0;
  for (const auto& v : items) n += 1 + static_cast<std::int64_t>(v.str().size() / kBytesPerStep);
  spend(n, line);
}

std::vector<std::string> Evaluator::explode(const std::string& s, int line) {
  spend(static_cast<std::int64_t>(s.size()) * kStepsPerCutByte, line);
  return code_points(s);
}

OriginsBuilder Evaluator::origins_builder() const {
  return OriginsBuilder(steps_left() / static_cast<std::size_t>(kStepsPerSpan));
}

Origins Evaluator::take_origins(OriginsBuilder& b, int line) {
  spend(static_cast<std::int64_t>(b.size()) * kStepsPerSpan, line);
  return b.take();
}

Value Evaluator::charged(Value v, int line) {
  if (v.origins()) spend(static_cast<std::int64_t>(v.origins()->size()) * kStepsPerSpan, line);
  return v;
}

void Evaluator::check_size(std::size_t bytes, int line) {
  if (bytes > limits_.max_output_bytes)
    fail(name_, line,
         "a string longer than " + std::to_string(limits_.max_output_bytes) +
             " bytes (the output limit)");
}

void Evaluator::emit(const std::string& text, int line) {
  if (text.size() > limits_.max_output_bytes - out_.size())
    fail(name_, line,
         "output longer than " + std::to_string(limits_.max_output_bytes) +
             " bytes (the output limit)");
  spend(static_cast<std::int64_t>(text.size() / kBytesPerStep), line);
  out_ += text;
}

void Evaluator::check_value_depth(const Value& v, int line) {
  if (v.depth() > limits_.max_value_depth)
    fail(name_, line,
         "a list or dict nested deeper than " + std::to_string(limits_.max_value_depth) +
             " (the value depth limit)");
}

Evaluator::Deeper::Deeper(Evaluator* ev, int line) : ev_(ev) {
  if (ev_->depth_ >= ev_->limits_.max_depth)
    fail(ev_->name_, line,
         "evaluation nested deeper than " + std::to_string(ev_->limits_.max_depth) +
             " (the depth limit; a macro that calls itself without end?)");
  ev_->deepest_ = std::max(ev_->deepest_, ++ev_->depth_);
}

bool Evaluator::eq(const Value& a, const Value& b, int line) {
  std::int64_t work = 0;
  const bool r = equal(a, b, &work);
  spend(work, line);
  return r;
}

void Evaluator::count_iteration(int line) {
  if (++loops_ > limits_.max_loop_iterations)
    fail(name_, line,
         "more than " + std::to_string(limits_.max_loop_iterations) +
             " loop iterations in one render (the loop limit)");
}

void Evaluator::check_not_namespace(const Value& v, int line) {
  // A namespace reachable from a namespace could chain them without end, which freeing would
  // walk recursively; chat templates keep strings, numbers and lists in theirs.
  if (v.kind() == K::ns || v.holds_ns())
    fail(name_, line, "a namespace inside a namespace is not supported");
}

}  // namespace kktrain::text::jinja
