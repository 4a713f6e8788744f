"""Independent PyTorch reference for `kktrain eval`: multiple-choice log-likelihood tasks and
perplexity of text and token files, computed the way EleutherAI's lm-evaluation-harness computes
them (HFLM with add_bos_token=False), with tests/parity/torch_reference.py's model in float64.

usage: eval_reference.py MODEL.h5 --seq-len L [--task F.jsonl]... [--data F]... [--json OUT]
                         [--tokenizer tokenizer.json --npm DIR]

MODEL.h5 is a kktrain HDF5 export (`<output_dir>/export.h5`; checkpoint.export_dtype=float32 of
an fp32 run holds the parameters exactly). Every parameter is read as stored (fp32) and the
forward runs in float64 (torch_reference's "float64" mode: only the rotary angles are fp32, as
the model defines them); log-probabilities are float64 log_softmax of the float64 logits, and
every sum is a float64 sum. L is the model length kktrain evaluates with (data.seq_len).

Tokens. Without --tokenizer the model is byte-level (vocabulary 256, token id = byte value):
encode(s) = list(s.encode("utf-8")). With --tokenizer, encode(s) is the tokenizer's ids WITHOUT
special tokens (Hugging Face `tokenizers` in Node, tests/parity/eval_tokenize.js; --npm is the
folder holding node_modules, e.g. BUILD/npm). The prefix token (the harness's prefix_token_id):
the tokenizer's BOS when tokenizer_config.json names one, else its EOS; byte-level: id 0 (the
NUL byte; the harness has no default for a model without BOS/EOS, this is HFLM's
prefix_token_id=0), so that every byte of a document is predicted once and bits_per_byte divides
by all of its bytes, as for a model with a BOS. --byte-prefix none gives the other rule (no
prefix: a document's first byte is context only, not scored nor counted in its bytes; an empty
context is refused).

Task files (JSONL, one item a line): {"context": str, "choices": [str, ...], "gold": int,
"target_delimiter": str (optional, default " ")}. As the harness (api/task.py ConfigurableTask
construct_requests / process_results; api/model.py TemplateLM._encode_pair / loglikelihood;
models/huggingface.py _loglikelihood_tokens):
  - each choice is the request (context, target_delimiter + choice);
  - non-empty context: its trailing whitespace (len(context) - len(context.rstrip()) characters)
    moves to the front of the continuation; whole = encode(context + continuation),
    ctx = encode(context), cont = whole[len(ctx):];
  - empty context: cont = encode(continuation); ctx = [prefix] unless cont[0] == prefix, in which
    case ctx = cont[:1] and cont = cont[1:];
  - score = sum over the cont tokens of log p(token | every token before it), the model's input
    being (ctx + cont)[-(L + 1):][:-1] (left truncation; the item is counted "truncated" when
    len(ctx + cont) > L + 1 for any of its choices); the harness asserts len(cont) <= L, so does
    this reference;
  - acc = [argmax(scores) == gold], acc_norm = [argmax(scores / len(choice)) == gold] (characters
    of the choice without the delimiter), acc_bytes = [argmax(scores / len(choice.encode()))
    == gold], numpy argmax (the first maximum); each metric the mean over items, its stderr the
    harness's mean_stderr (sample standard deviation with n - 1, over sqrt(n)); null for n < 2
    (the harness prints "N/A").

Data files:
  - text (.txt: the whole file one document; .jsonl: one document a line, the string at "text",
    blank lines skipped): ids = encode(document); the harness's rolling windows
    (utils.get_rolling_token_windows with the prefix token, max_seq_len L, context_len 1, then
    make_disjoint_window), each window scored as a (context, continuation) request above, so
    every token of the document is predicted once: the first window [prefix] + ids[:L-1] predicts
    ids[:L], the next ones predict L tokens each from the one token before them, and the last,
    shorter window predicts its tokens with a full L-token input. tokens = predicted tokens,
    loss = sum nll / tokens, perplexity = exp(loss), bytes = UTF-8 bytes of the documents,
    bits_per_byte = sum nll / bytes / ln 2 (the harness's bits_per_byte aggregation).
  - tokens (.bin llm.c shards, 256 int32 header: GPT-2's uint16 or Llama 3's uint32 ids; .u16 /
    .uint16 raw uint16, .u32 / .uint32 raw uint32): one document; disjoint windows, window k input
    tokens[kL : kL + L], targets tokens[kL + 1 : kL + L + 1] (the last shorter): N - 1 tokens
    predicted, loss their mean nll. No bytes.

Output (--json, else stdout): the fields of `kktrain eval --json` (model, seq_len, data, tasks
with scores and choice_tokens), "ranks" omitted.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BYTE_PREFIX = 0  # byte-level models: the prefix token (no BOS / EOS exists; None: no prefix)


class Refused(ValueError):
    """An input the reference does not accept (FILE:LINE: why)."""


# ---- the model ---------------------------------------------------------------------------------


class Model:
    """A kktrain export as torch_reference's float64 model: logprobs(ids) -> (T, V) float64."""

    def __init__(self, path: str):
        import h5py
        import torch
        import torch_reference as tr
        self.torch, self.tr = torch, tr
        with h5py.File(path, "r") as f:
            attrs = {k: (tr._text(v) if isinstance(v, (bytes, np.bytes_, str)) else
                         v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
            params, storage, aliases = {}, {}, {}
            for name, ds in f["params"].items():
                params[name] = np.asarray(ds[()], dtype=np.float32)
                storage[name] = tr._text(ds.attrs.get("dtype", attrs.get("storage_dtype",
                                                                          "float32")))
                if "alias" in ds.attrs:
                    aliases[tr._text(ds.attrs["alias"])] = name
        if attrs.get("mtp_num_layers", 0):
            attrs["compute_mtp"] = 0  # only the main head scores tokens
        attrs.setdefault("compute_dtype", "float32")
        attrs.setdefault("storage_dtype", "float32")
        dummy = np.zeros((1, 1), dtype=np.int64)
        self.dump = tr.Dump(attrs=attrs, params=params, storage=storage, aliases=aliases,
                            grads={}, input_ids=dummy, targets=dummy, loss=0.0)
        self.ref = tr.Reference(self.dump, "float64")
        self.V = self.dump.V
        self.max_seq_len = int(attrs.get("max_seq_len", 0))
        self.attrs = attrs

    def logprobs(self, ids: Sequence[int]):
        torch = self.torch
        if not ids:
            raise ValueError("an empty model input")
        if max(ids) >= self.V:
            raise Refused(f"token id {max(ids)} is outside the model's vocabulary of {self.V}")
        t = torch.tensor([list(ids)], dtype=torch.int64)
        with torch.no_grad():
            h = self.ref.hidden(t)
            logits = self.ref.head_logits(h, "model.norm.weight").to(torch.float64)
            return torch.log_softmax(logits[0], dim=-1).numpy()


# ---- tokens ------------------------------------------------------------------------------------


class Encoder:
    """encode(strings) -> ids without special tokens; prefix: the harness's prefix_token_id."""

    def __init__(self, tokenizer: Optional[str] = None, npm: Optional[str] = None,
                 byte_prefix: Optional[int] = BYTE_PREFIX):
        self.tokenizer, self.npm = tokenizer, npm
        self.cache: Dict[str, List[int]] = {}
        self.prefix = byte_prefix
        if tokenizer is not None:
            if npm is None:
                raise SystemExit("--tokenizer needs --npm DIR (the folder with node_modules)")
            r = self._node([])
            prefix = r["bos_id"] if r["bos_id"] is not None else r["eos_id"]
            if prefix is None:
                raise SystemExit(f"{tokenizer}: no bos_token or eos_token (the prefix token)")
            self.prefix = int(prefix)

    def _node(self, texts):
        p = subprocess.run(["node", os.path.join(HERE, "eval_tokenize.js"), "--npm", self.npm,
                            "--tokenizer", self.tokenizer], input=json.dumps({"texts": texts}),
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"eval_tokenize.js failed:\n{p.stderr}")
        return json.loads(p.stdout)

    def prepare(self, texts):
        """Encodes all `texts` at once (one node process) into the cache."""
        todo = sorted({s for s in texts if s not in self.cache})
        if self.tokenizer is None:
            for s in todo:
                self.cache[s] = list(s.encode("utf-8"))
        elif todo:
            for s, ids in zip(todo, self._node(todo)["ids"]):
                self.cache[s] = [int(i) for i in ids]

    def encode(self, s: str) -> List[int]:
        if s not in self.cache:
            self.prepare([s])
        return self.cache[s]


# ---- harness rules -----------------------------------------------------------------------------


def split_pair(context: str, continuation: str) -> Tuple[str, str]:
    """_encode_pair's strings: the context's trailing whitespace moved onto the continuation."""
    n = len(context) - len(context.rstrip())
    if n > 0:
        return context[:-n], context[-n:] + continuation
    return context, continuation


def encode_pair(enc: Encoder, context: str, continuation: str) -> Tuple[List[int], List[int]]:
    """TemplateLM.loglikelihood's (context_enc, continuation_enc) of one request."""
    if context == "":
        if enc.prefix is None:
            raise Refused("an empty context needs a prefix token")
        cont = enc.encode(continuation)
        if not cont:
            raise Refused("an empty continuation")
        if cont[0] != enc.prefix:
            return [enc.prefix], cont
        return cont[:1], cont[1:]
    ctx_s, cont_s = split_pair(context, continuation)
    whole = enc.encode(ctx_s + cont_s)
    ctx = enc.encode(ctx_s)
    return ctx, whole[len(ctx):]


def request_strings(context: str, continuation: str) -> List[str]:
    if context == "":
        return [continuation]
    c, k = split_pair(context, continuation)
    return [c, c + k]


def score(model: Model, ctx: List[int], cont: List[int], L: int) -> Tuple[float, bool]:
    """_loglikelihood_tokens: (sum of the cont tokens' log-probabilities, truncated)."""
    if not ctx or not cont:
        raise Refused(f"empty context ({len(ctx)}) or continuation ({len(cont)}) tokens")
    if len(cont) > L:
        raise Refused(f"a continuation of {len(cont)} tokens is longer than the model length {L}")
    seq = ctx + cont
    inp = seq[-(L + 1):][:-1]
    lp = model.logprobs(inp)
    n = len(cont)
    rows = lp[len(inp) - n:]  # the logits that predict the continuation's tokens
    return float(sum(float(rows[i, t]) for i, t in enumerate(cont))), len(seq) > L + 1


def mean_stderr(values: Sequence[float]) -> Optional[float]:
    """metrics.mean_stderr: sample standard deviation (n - 1) / sqrt(n); None when n < 2."""
    n = len(values)
    if n < 2:
        return None
    mu = sum(values) / n
    return math.sqrt(sum((x - mu) ** 2 for x in values) / (n - 1)) / math.sqrt(n)


def read_task(path: str) -> List[dict]:
    items = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{i}"
            try:
                d = json.loads(line)
            except ValueError as e:
                raise Refused(f"{where}: not JSON ({e})")
            if not isinstance(d, dict) or not isinstance(d.get("context"), str):
                raise Refused(f"{where}: needs a string \"context\"")
            ch = d.get("choices")
            if not isinstance(ch, list) or not ch or not all(isinstance(c, str) and c for c in ch):
                raise Refused(f"{where}: \"choices\" must be a non-empty list of non-empty strings")
            g = d.get("gold")
            if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < len(ch):
                raise Refused(f"{where}: \"gold\" must be an index into the {len(ch)} choices")
            delim = d.get("target_delimiter", " ")
            if not isinstance(delim, str):
                raise Refused(f"{where}: \"target_delimiter\" must be a string")
            items.append({"context": d["context"], "choices": ch, "gold": g, "delim": delim,
                          "where": where})
    return items


def choice_metrics(scores: Sequence[float], choices: Sequence[str], gold: int) -> Dict[str, float]:
    """process_results' acc, acc_norm, acc_bytes of one item (numpy argmax: the first maximum)."""
    lls = np.asarray(scores, dtype=np.float64)
    chars = np.array([float(len(c)) for c in choices])
    nbytes = np.array([float(len(c.encode("utf-8"))) for c in choices])
    return {"acc": 1.0 if int(np.argmax(lls)) == gold else 0.0,
            "acc_norm": 1.0 if int(np.argmax(lls / chars)) == gold else 0.0,
            "acc_bytes": 1.0 if int(np.argmax(lls / nbytes)) == gold else 0.0}


def task_metrics(items: List[dict], scores: List[List[float]]) -> Dict[str, Optional[float]]:
    """Each metric's mean and stderr over the items, from `scores` (anyone's: the test also runs
    this on kktrain's own scores)."""
    per = [choice_metrics(s, it["choices"], it["gold"]) for it, s in zip(items, scores)]
    out: Dict[str, Optional[float]] = {}
    for k in ("acc", "acc_norm", "acc_bytes"):
        v = [p[k] for p in per]
        out[k] = sum(v) / len(v)
        out[k + "_stderr"] = mean_stderr(v)
    return out


def eval_task(model: Model, enc: Encoder, path: str, L: int) -> dict:
    items = read_task(path)
    strings = []
    for it in items:
        for c in it["choices"]:
            strings += request_strings(it["context"], it["delim"] + c)
    enc.prepare(strings)
    scores, counts, truncated = [], [], 0
    for it in items:
        row, cnt, cut = [], [], False
        for c in it["choices"]:
            try:
                ctx, cont = encode_pair(enc, it["context"], it["delim"] + c)
                s, t = score(model, ctx, cont, L)
            except Refused as e:
                raise Refused(f"{it['where']}: {e}")
            row.append(s)
            cnt.append(len(cont))
            cut = cut or t
        scores.append(row)
        counts.append(cnt)
        truncated += int(cut)
    out = {"file": path, "name": os.path.splitext(os.path.basename(path))[0], "items": len(items),
           "truncated": truncated}
    out.update(task_metrics(items, scores))
    out["scores"] = scores
    out["choice_tokens"] = counts
    return out


# ---- perplexity --------------------------------------------------------------------------------


def rolling_windows(ids: List[int], prefix: int, L: int) -> List[Tuple[List[int], List[int]]]:
    """get_rolling_token_windows(ids, prefix, max_seq_len=L, context_len=1), each window through
    make_disjoint_window: (context, continuation) pairs predicting every token once."""
    out = []
    if not ids:
        return out
    first = min(L, len(ids))
    out.append(([prefix] + ids[:first - 1], ids[:first]))
    done = first
    while done < len(ids):
        n = min(len(ids) - done, L)  # pred_len = L - context_len + 1 = L
        end = done + n
        out.append((ids[end - L - 1:end - 1], ids[end - n:end]))
        done += n
    # make_disjoint_window: the context keeps its first len(a) - (len(b) - 1) tokens
    return [(a[:len(a) - (len(b) - 1)], b) for a, b in out]


def read_documents(path: str) -> List[str]:
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    if not path.endswith(".jsonl"):
        return [text]
    docs = []
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            raise Refused(f"{path}:{i}: not JSON ({e})")
        if not isinstance(d, dict) or not isinstance(d.get("text"), str):
            raise Refused(f"{path}:{i}: needs a string \"text\"")
        docs.append(d["text"])
    return docs


def read_tokens(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".bin") and len(raw) >= 1024:
        magic, version, count = struct.unpack_from("<3i", raw)
        if magic == 20240520:
            return np.frombuffer(raw[1024:1024 + 2 * count], dtype="<u2").astype(np.int64)
        if magic == 20240801:
            return np.frombuffer(raw[1024:1024 + 4 * count], dtype="<u4").astype(np.int64)
    if path.endswith((".u32", ".uint32")):
        return np.frombuffer(raw, dtype="<u4").astype(np.int64)
    if path.endswith((".bin", ".u16", ".uint16")):
        return np.frombuffer(raw, dtype="<u2").astype(np.int64)
    raise Refused(f"{path}: not a token file this reference reads")


def is_token_file(path: str) -> bool:
    return path.endswith((".bin", ".u16", ".uint16", ".u32", ".uint32"))


def eval_data(model: Model, enc: Encoder, path: str, L: int) -> dict:
    name = os.path.splitext(os.path.basename(path))[0]
    if is_token_file(path):
        toks = read_tokens(path).tolist()
        nll, n = 0.0, 0
        for k in range(0, max(len(toks) - 1, 0), L):
            inp, tgt = toks[k:k + L], toks[k + 1:k + L + 1]
            inp = inp[:len(tgt)]
            lp = model.logprobs(inp)
            nll -= sum(float(lp[i, t]) for i, t in enumerate(tgt))
            n += len(tgt)
        return {"file": path, "name": name, "kind": "tokens", "documents": 1, "tokens": n,
                "loss": nll / n, "perplexity": math.exp(nll / n)}
    docs = read_documents(path)
    enc.prepare(docs)
    nll, n, nbytes = 0.0, 0, 0
    for d in docs:
        ids, prefix, nb = enc.encode(d), enc.prefix, len(d.encode("utf-8"))
        if prefix is None:  # no prefix token: the first token is context only
            ids, prefix, nb = ids[1:], (ids[0] if ids else None), max(nb - 1, 0)
        nbytes += nb
        for ctx, cont in rolling_windows(ids, prefix, L):
            s, _ = score(model, ctx, cont, L)
            nll -= s
            n += len(cont)
    loss = nll / n if n else None
    return {"file": path, "name": name, "kind": "text", "documents": len(docs), "tokens": n,
            "loss": loss, "perplexity": math.exp(loss) if n else None, "bytes": nbytes,
            "bits_per_byte": nll / nbytes / math.log(2) if nbytes else None}


def evaluate(model_path: str, L: int, tasks=(), data=(), tokenizer=None, npm=None,
             byte_prefix: Optional[int] = BYTE_PREFIX) -> dict:
    model = Model(model_path)
    enc = Encoder(tokenizer, npm, byte_prefix)
    if tokenizer is None and model.V != 256:
        raise SystemExit(f"{model_path}: vocabulary {model.V}, a byte-level model has 256 "
                         "(give --tokenizer)")
    return {"model": model_path, "seq_len": L,
            "data": [eval_data(model, enc, p, L) for p in data],
            "tasks": [eval_task(model, enc, p, L) for p in tasks]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--task", action="append", default=[])
    ap.add_argument("--data", action="append", default=[])
    ap.add_argument("--json")
    ap.add_argument("--tokenizer")
    ap.add_argument("--npm")
    ap.add_argument("--byte-prefix", default=str(BYTE_PREFIX),
                    help="byte-level models: the prefix token id, or none (default 0)")
    a = ap.parse_args()
    bp = None if a.byte_prefix == "none" else int(a.byte_prefix)
    try:
        out = evaluate(a.model, a.seq_len, a.task, a.data, a.tokenizer, a.npm, bp)
    except Refused as e:
        print(f"eval_reference.py: {e}", file=sys.stderr)
        return 2
    text = json.dumps(out, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
