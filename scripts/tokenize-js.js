#!/usr/bin/env node
// tokenize-js.js — GPT-2 token ids of a file from an independent JavaScript implementation, one per
// line, for scripts/tests/tokenizer.sh to compare with tp_tokenize's.
//
//   node scripts/tokenize-js.js NPM_PREFIX gpt-3-encoder FILE           ("<|endoftext|>" is text)
//   node scripts/tokenize-js.js NPM_PREFIX gpt-tokenizer FILE           (r50k_base; the same)
//   node scripts/tokenize-js.js NPM_PREFIX gpt-tokenizer FILE special   ("<|endoftext|>" -> 50256)
//
// NPM_PREFIX is the folder `npm install --prefix` installed the packages into. The file is read as
// UTF-8 the way Node.js does it: each maximal invalid subpart becomes one U+FFFD.
//
// gpt-tokenizer 4.0.0 finds an allowed special token only at the start of the text (its search
// pattern is sticky), so with `special` the text is cut at each "<|endoftext|>" here and every
// part is passed to it with the special token in front, where it does find it.
'use strict';
const fs = require('fs');
const path = require('path');

const [prefix, which, file, mode] = process.argv.slice(2);
const special = mode === 'special';
if (!prefix || !file || !['gpt-3-encoder', 'gpt-tokenizer'].includes(which) ||
    (mode !== undefined && (!special || which !== 'gpt-tokenizer'))) {
  console.error('usage: tokenize-js.js NPM_PREFIX gpt-3-encoder|gpt-tokenizer FILE [special]');
  process.exit(2);
}
const modules = path.resolve(prefix, 'node_modules');
const text = fs.readFileSync(file, 'utf8');
let ids;
if (which === 'gpt-3-encoder') {
  ids = require(path.join(modules, 'gpt-3-encoder')).encode(text);
} else {
  const r50k = require(path.join(modules, 'gpt-tokenizer', 'cjs', 'encoding', 'r50k_base.js'));
  if (!special) {
    ids = r50k.encode(text, { disallowedSpecial: new Set() });  // nothing special: all is text
  } else {
    const eot = '<|endoftext|>';
    ids = [];
    text.split(eot).forEach((part, i) => {
      ids.push(...r50k.encode(i === 0 ? part : eot + part, { allowedSpecial: 'all' }));
    });
  }
}
process.stdout.write(ids.length ? ids.join('\n') + '\n' : '');
