#include "core/log.hpp"
#include "core/log_testing.hpp"

#include <cstdio>

namespace kktrain {
namespace log {
namespace {
int g_rank = 0;
bool g_quiet = false;
std::vector<std::string> g_warnings;
}  // namespace

void set_rank(int r) {
  g_rank = r;
}
int rank() {
  return g_rank;
}
void set_quiet(bool q) {
  g_quiet = q;
}

std::string one_line(const std::string& msg) {
  std::string out;
  out.reserve(msg.size());
  for (const char ch : msg) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

void info(const std::string& msg) {
  if (g_rank != 0 || g_quiet) return;
  std::fprintf(stderr, "kktrain: %s\n", one_line(msg).c_str());
}

static void print_warning(const std::string& msg) {
  if (g_rank != 0) return;
  std::fprintf(stderr, "kktrain: warning: %s\n", one_line(msg).c_str());
}

void warn(const std::string& msg) {
  g_warnings.push_back(msg);
  print_warning(msg);
}

void warn_about_launch(const std::string& msg) {
  print_warning(msg);
}

const std::vector<std::string>& warnings() {
  return g_warnings;
}
}  // namespace log

namespace test_hooks {

void clear_warnings() {
  log::g_warnings.clear();
}

}  // namespace test_hooks
}  // namespace kktrain
