"""TensorBoard event files (logging.tensorboard, io/tensorboard.hpp) read back by an independent
reader: every record's length and data CRCs checked with CRC-32C from Debian's python3-crcmod
(masked as TensorBoard masks them), the Event protobuf fields decoded by hand here, and every value
compared with the metrics.jsonl row it came from.

usage: test_tensorboard.py KKTRAIN INPUTS_DIR CASE      (tests/cli/train_tests.cmake)

- events: a run with validation rows: the first record is file_version "brain.Event:2", then one
  Event per metrics row with a step, in order, whose scalars are exactly the row's numbers as
  float32 (nested objects as "key/inner"), under torchtitan's tags where it has one (loss ->
  loss_metrics/global_avg_loss, tokens_per_s -> throughput(tps), val_loss ->
  validation_metrics/loss, peak_* -> memory/peak_*); a resumed run writes a second file, whose
  Events start after the resumed step; logging.tensorboard=false writes none.
"""

import glob
import json
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

TAGS = {"loss": "loss_metrics/global_avg_loss", "tokens_per_s": "throughput(tps)",
        "val_loss": "validation_metrics/loss"}


def crc_fun():
    try:
        import crcmod.predefined
    except ImportError:
        raise tt.Skip("python3-crcmod is not installed")
    return crcmod.predefined.mkCrcFun("crc-32c")


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff


def varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7f) << shift
        shift += 7
        if c < 0x80:
            return v, i


def fields(b):
    """(field number, wire type, value) of a protobuf message's bytes."""
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        num, wire = k >> 3, k & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        elif wire == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise tt.Failure(f"unexpected wire type {wire}")
        out.append((num, wire, v))
    return out


def read_events(path):
    crc = crc_fun()
    data = open(path, "rb").read()
    i, events = 0, []
    while i < len(data):
        check(i + 12 <= len(data), f"{path}: a truncated record header at byte {i}")
        header = data[i:i + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        check(hcrc == masked(crc(header)), f"{path}: length CRC of the record at byte {i}")
        body = data[i + 12:i + 12 + n]
        (dcrc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        check(len(body) == n and dcrc == masked(crc(body)),
              f"{path}: data CRC of the record at byte {i}")
        i += 16 + n
        ev = {"values": {}}
        for num, wire, v in fields(body):
            if num == 1 and wire == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif num == 2 and wire == 0:
                ev["step"] = v
            elif num == 3 and wire == 2:
                ev["file_version"] = v.decode()
            elif num == 5 and wire == 2:
                for snum, _, sv in fields(v):
                    check(snum == 1, "Summary holds only values")
                    tag = val = None
                    for vnum, vwire, vv in fields(sv):
                        if vnum == 1:
                            tag = vv.decode()
                        elif vnum == 2 and vwire == 5:
                            val = struct.unpack("<f", vv)[0]
                    check(tag is not None and val is not None, f"a Value without tag/value {sv}")
                    ev["values"][tag] = val
            else:
                raise tt.Failure(f"unexpected Event field {num} (wire {wire})")
        events.append(ev)
    return events


def row_scalars(row, prefix=""):
    out = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out.update(row_scalars(v, prefix + k + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
            tag = prefix + k if prefix else TAGS.get(k, "memory/" + k if k.startswith("peak_")
                                                    else k)
            out[tag] = struct.unpack("<f", struct.pack("<f", float(v)))[0]
    return out


def check_file(path, rows):
    events = read_events(path)
    check(events and events[0].get("file_version") == "brain.Event:2",
          f"{path}: the first record is file_version brain.Event:2: {events[:1]}")
    events = events[1:]
    rows = [r for r in rows if "step" in r]
    check(len(events) == len(rows), f"{path}: {len(events)} events for {len(rows)} rows")
    for ev, row in zip(events, rows):
        check(ev["step"] == row["step"], f"event step {ev['step']} vs row {row['step']}")
        want = row_scalars(row)
        check(ev["values"] == want, f"step {row['step']}: event values differ from the row:\n"
              f"{ev['values']}\n{want}")
        check(ev["wall_time"] > 1.6e9, f"wall_time {ev['wall_time']}")
    return len(events)


def case_events():
    with tempfile.TemporaryDirectory(prefix="kktrain_tb_") as tmp:
        out = os.path.join(tmp, "run")
        over = [*tt.TINY, "train.log_every=1", "train.val_every=3", "train.max_steps=6",
                "checkpoint.save_every=3"]
        r = tt.Run("default.yaml", out, over).ok()
        files = glob.glob(os.path.join(out, "tb", "events.out.tfevents.*"))
        check(len(files) == 1, f"one event file: {files}" + r.where)
        n = check_file(files[0], r.rows)
        check(any("val_loss" in x for x in r.rows), "the run has validation rows")
        print(f"events: {n} events equal to metrics.jsonl's rows, CRCs checked")
        # resumed to step 9: a second file, from step 7 on
        more = [o for o in over if o != "checkpoint.resume=none" and not o.startswith(
            "train.max_steps")] + ["train.max_steps=9"]
        r2 = tt.Run("default.yaml", out, more).ok()
        files2 = sorted(set(glob.glob(os.path.join(out, "tb", "events.out.tfevents.*"))) -
                        set(files))
        check(len(files2) == 1, f"a resumed run writes a new file: {files2}" + r2.where)
        new_rows = [x for x in r2.rows if x["step"] > 6]
        n2 = check_file(files2[0], new_rows)
        check(n2 > 0 and read_events(files[0])[1:] and n2 == len(new_rows),
              "the resumed file holds the new steps' rows")
        print(f"resumed: a second file of {n2} events")
        off = os.path.join(tmp, "off")
        tt.Run("default.yaml", off, [*over, "logging.tensorboard=false"]).ok()
        check(not os.path.exists(os.path.join(off, "tb")), "logging.tensorboard=false: no tb/")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
