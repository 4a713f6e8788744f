// Rank-aware logging. Info and warnings print on rank 0 only (every rank computes the same
// warnings, so printing once is enough); warnings are also kept so `kktrain audit --json` and
// tests can read them back. Output goes to stderr so stdout stays machine-readable.
#pragma once

#include <string>
#include <vector>

namespace kktrain {
namespace log {

void set_rank(int rank);
int rank();
// Suppresses info lines (warnings still print); used by commands whose stdout is the product.
void set_quiet(bool quiet);

void info(const std::string& msg);
void warn(const std::string& msg);
// A warning about how the process was launched (its thread settings), printed like warn() but
// not kept: the audit's warnings are the configuration's, the same whatever the launch.
void warn_about_launch(const std::string& msg);

// msg with control characters (newlines, tabs, escape sequences, NUL) written as \n, \t, \xNN:
// every message kktrain prints is one line, whatever a config value or file name holds.
std::string one_line(const std::string& msg);

// Warnings emitted so far in this process, in order (tests reset them: core/log_testing.hpp).
const std::vector<std::string>& warnings();

}  // namespace log
}  // namespace kktrain
