#!/usr/bin/env node
// Hugging Face's `tokenizers` (its Node binding, pinned by tests/text/package.json) on files:
// the ids and offsets of encode(text, add_special_tokens), for tests/cli/test_tokenizer_offsets.py.
//
// usage: node reference_offsets.js --npm DIR TOKENIZER_JSON FILE...
//
// One JSON line per file, in order: {"file": F, "ids": [...], "offsets": [[begin, end], ...]}
// where the offsets are the Rust library's Encoding offsets as the binding gives them: in
// characters (code points) of the file's text.
"use strict";

const fs = require("fs");
const path = require("path");

async function main(argv) {
  if (argv.length < 4 || argv[0] !== "--npm") {
    throw new Error("usage: node reference_offsets.js --npm DIR TOKENIZER_JSON FILE...");
  }
  const { Tokenizer } = require(path.resolve(argv[1], "node_modules", "tokenizers"));
  const tokenizer = Tokenizer.fromFile(argv[2]);
  for (const file of argv.slice(3)) {
    const text = fs.readFileSync(file, "utf8");
    const e = await tokenizer.encode(text, null, { addSpecialTokens: true });
    process.stdout.write(
      JSON.stringify({ file, ids: Array.from(e.getIds()), offsets: e.getOffsets() }) + "\n");
  }
}

main(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`reference_offsets.js: ${e.stack || e}\n`);
  process.exit(1);
});
