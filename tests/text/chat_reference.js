#!/usr/bin/env node
// Hugging Face's `tokenizers` (its Node binding, under NPM_DIR/node_modules) for
// tests/cli/test_chat_data.py: ids of texts without special tokens, and the text of id lists.
//
// usage: node chat_reference.js NPM_DIR < REQUEST
// REQUEST (JSON): {"tokenizer": tokenizer.json path, "encode": [text, ...], "decode": [[id, ...],
// ...]}; prints {"encode": [[id, ...], ...] (encode(text, null, {addSpecialTokens: false})),
// "offsets": [[[begin, end], ...], ...] (each token's code points in its text), "decode":
// [text, ...] (decode(ids, false): special tokens kept)}.
"use strict";

const fs = require("fs");
const path = require("path");

async function main() {
  const npm = process.argv[2];
  const req = JSON.parse(fs.readFileSync(0, "utf8"));
  const { Tokenizer } = require(path.join(path.resolve(npm), "node_modules", "tokenizers"));
  const t = Tokenizer.fromFile(req.tokenizer);
  const out = { encode: [], offsets: [], decode: [] };
  for (const text of req.encode || []) {
    const enc = await t.encode(text, null, { addSpecialTokens: false });
    out.encode.push(Array.from(enc.getIds()));
    out.offsets.push(enc.getOffsets());
  }
  for (const ids of req.decode || []) out.decode.push(ids.length ? await t.decode(ids, false) : "");
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + "\n");
  process.exit(1);
});
