// Test seams of core/log.hpp. Included by tests only, never by production code: a process keeps
// every warning it emits (kktrain audit --json reports them); a test that checks which warnings
// one call emits forgets the earlier ones first.
#pragma once

namespace kktrain {
namespace test_hooks {

// Forgets the warnings emitted so far (log::warnings() is empty afterwards).
void clear_warnings();

}  // namespace test_hooks
}  // namespace kktrain
