// Prints JSON the way kktrain writes it, for tests/cli/test_json_text.py to parse with Python's
// json. WHAT: layout, a metrics.jsonl row (io/metrics.hpp) of every kind of column (numbers, NaN
// and infinities, nested and empty objects, member order); metrics, a row whose key and string
// value hold every control character, quotes, backslashes, DEL and UTF-8; audit, `kktrain audit
// --json` of a report (optim/audit.hpp) whose optimizer name and warning hold the same.
//
// usage: json_rows layout|metrics|audit
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "io/metrics.hpp"
#include "optim/audit.hpp"

using namespace kktrain;

// Every byte 0x01..0x1f, then '"', '\\', DEL and "é" (UTF-8).
std::string hostile() {
  std::string s = "run";
  for (int c = 1; c < 0x20; ++c) s += static_cast<char>(c);
  return s + "\"\\\x7f\xc3\xa9";
}

void print_layout() {
  JsonLine inner;
  inner.integer("a", 1).num("b", 0.5);
  JsonLine layout;
  layout.integer("step", 7)
      .num("loss", 0.1)
      .num("nan", std::nan(""))
      .num("inf", std::numeric_limits<double>::infinity())
      .num("ninf", -std::numeric_limits<double>::infinity())
      .num("whole", 3.0)
      .boolean("ok", true)
      .null("none")
      .str("name", "plain")
      .object("nested", inner)
      .object("empty", JsonLine());
  std::printf("%s\n", layout.text().c_str());
}

int main(int argc, char** argv) {
  const std::string what = argc == 2 ? argv[1] : "";
  if (what == "layout") {
    print_layout();
  } else if (what == "metrics") {
    JsonLine row;
    row.integer("step", 1).str("name", hostile()).str(hostile(), "key");
    std::printf("%s\n", row.text().c_str());
  } else if (what == "audit") {
    AuditReport r;
    r.optimizer = hostile();
    r.warnings = {"warning " + hostile()};
    std::printf("%s", audit_json(r).c_str());
  } else {
    std::fprintf(stderr, "usage: json_rows layout|metrics|audit\n");
    return 2;
  }
  return 0;
}
