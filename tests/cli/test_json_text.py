"""kktrain's JSON outputs parse with Python's json whatever their strings hold (core/json_text.hpp):
metrics.jsonl rows and `kktrain audit --json` escape every control character, quote and
backslash (nlohmann::json), and keep the layout earlier runs wrote (", " and ": ", %.17g numbers,
NaN / Infinity, member order).

usage: test_json_text.py KKTRAIN INPUTS_DIR JSON_ROWS CASE
"""

import json
import subprocess
import sys

import test_train as tt
from test_train import check

HOSTILE = "run" + "".join(chr(c) for c in range(1, 0x20)) + "\"\\\x7fé"
# The bytes the writer of metrics.jsonl printed for this row before nlohmann wrote it.
LAYOUT = ('{"step": 7, "loss": 0.10000000000000001, "nan": NaN, "inf": Infinity, '
          '"ninf": -Infinity, "whole": 3, "ok": true, "none": null, "name": "plain", '
          '"nested": {"a": 1, "b": 0.5}, "empty": {}}')


def output(tool, what):
    """What `json_rows WHAT` prints, decoded (one line expected; a raw newline makes more)."""
    p = subprocess.run([tool, what], capture_output=True, timeout=60)
    check(p.returncode == 0, f"json_rows {what} exited {p.returncode}: {p.stderr!r}")
    return p.stdout.decode("utf-8").rstrip("\n")


def parse(line, what):
    try:
        return json.loads(line)
    except ValueError as e:
        raise tt.Failure(f"{what} is not JSON ({e}): {line!r}")


def case_metrics_layout(tool):
    line = output(tool, "layout")
    check(line == LAYOUT, f"metrics row layout changed:\n  {line}\nexpected\n  {LAYOUT}")
    doc = parse(line, "the metrics row")
    check(list(doc) == ["step", "loss", "nan", "inf", "ninf", "whole", "ok", "none", "name",
                        "nested", "empty"], f"column order {list(doc)}")


def case_control_characters(tool):
    row, audit = output(tool, "metrics"), output(tool, "audit")
    doc = parse(row, "the metrics row with control characters")
    check(doc.get("name") == HOSTILE and doc.get(HOSTILE) == "key", f"round trip: {doc!r}")
    doc = parse(audit, "the audit with control characters")
    check(doc.get("optimizer") == HOSTILE and doc.get("warnings") == ["warning " + HOSTILE],
          f"round trip: {doc!r}")


def case_audit_tab_in_glob(tool):
    # A config value with a tab reaches the audit's warnings through kktrain itself.
    glob = "nothing\tx*"
    rc, out, err = tt.run(["audit", tt.config(tt.DEFAULT), *tt.TINY_MODEL,
                           f'freeze_config.freeze_modules=[{{glob: "{glob}"}}]', "--json"])
    check(rc == 0, f"audit exited {rc}: {err}")
    doc = parse(out, "audit --json")
    check(any(glob in w for w in doc["warnings"]), f"warnings {doc['warnings']!r}")


if __name__ == "__main__":
    tt.KKTRAIN, tt.INPUTS = sys.argv[1], sys.argv[2]
    try:
        globals()["case_" + sys.argv[4]](sys.argv[3])
    except tt.Failure as e:
        print(f"FAIL: {e}")
        sys.exit(1)
    print("ok")
