#!/usr/bin/env node
// Token ids of strings WITHOUT special tokens, for tests/parity/eval_reference.py.
//
// usage: node eval_tokenize.js --npm DIR --tokenizer FILE < request.json
//
// FILE is a tokenizer.json (a tokenizer_config.json beside it names bos_token / eos_token). The
// encoder is Hugging Face's `tokenizers` (Rust, its Node binding) under DIR/node_modules, pinned
// by tests/text/package.json: encode(text, null, {addSpecialTokens: false}).
// stdin: {"texts": [S, ...]}; stdout: {"ids": [[...], ...], "bos_id": I|null, "eos_id": I|null}.
"use strict";

const fs = require("fs");
const path = require("path");

function arg(argv, name) {
  const i = argv.indexOf(name);
  if (i < 0 || i + 1 >= argv.length) throw new Error(`${name} VALUE is required`);
  return argv[i + 1];
}

function specialId(t, config, key) {
  let s = config[key];
  if (s && typeof s === "object") s = s.content;
  if (typeof s !== "string") return null;
  const id = t.tokenToId(s);
  return id === undefined || id === null ? null : id;
}

async function main() {
  const argv = process.argv.slice(2);
  const npm = arg(argv, "--npm");
  const file = arg(argv, "--tokenizer");
  const { Tokenizer } = require(path.resolve(npm, "node_modules", "tokenizers"));
  const t = Tokenizer.fromFile(file);
  const cfgPath = path.join(path.dirname(file), "tokenizer_config.json");
  const config = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  const req = JSON.parse(fs.readFileSync(0, "utf8"));
  const ids = [];
  for (const s of req.texts) {
    ids.push(Array.from((await t.encode(s, null, { addSpecialTokens: false })).getIds()));
  }
  const out = { ids, bos_id: specialId(t, config, "bos_token"),
                eos_id: specialId(t, config, "eos_token") };
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  process.stderr.write(`eval_tokenize.js: ${e.message}\n`);
  process.exit(1);
});
