# readme.sh — sourced by scripts/run-tests.sh (section 8b): the README keeps its promise of one screen
# (at most 250 lines), and every relative link on it and on the four pages it hands the reader to
# (docs/training.md, troubleshooting.md, performance.md, testing.md) leads somewhere: a file that
# exists, and a #anchor that a heading of that page produces (scripts/check-links.py says how).
# And the check can fail: a copy of the pages with a broken file link, a broken anchor and a README
# of 251 lines must each be refused. Last, every --flag docs/training.md names is one that some
# program's --help lists (the page explains flags; --help is their list, so the page cannot name a
# flag that no longer exists).
readme_pages=(README.md docs/training.md docs/troubleshooting.md docs/performance.md docs/testing.md)
readme_log=$logs/readme_links.log
if python3 scripts/check-links.py --max-lines 250 "${readme_pages[@]}" >"$readme_log" 2>&1; then
  pass 1; tail -1 "$readme_log"
else
  fail "README: $(grep -c '^✗' "$readme_log") broken links or too long (see $readme_log)"; cat "$readme_log"
fi

# It can fail: the same pages in a scratch tree, each broken one way.
readme_tmp=$tmp/readme
readme_broken() {  # readme_broken NAME NEEDLE: the check must refuse the scratch copy, naming NEEDLE
  local name=$1 needle=$2 log=$logs/readme_broken_${1// /_}.log
  if (cd "$readme_tmp" && python3 scripts/check-links.py --max-lines 250 "${readme_pages[@]}") >"$log" 2>&1; then
    fail "README check: accepted $name (see $log)"
  elif grep -q -- "$needle" "$log"; then
    pass 1; echo "✓ README check: refuses $name: $(grep -m1 -- "$needle" "$log" | cut -c1-110)"
  else
    fail "README check: refused $name, but without naming $needle (see $log)"
  fi
}
readme_fresh() {
  rm -rf "$readme_tmp"; mkdir -p "$readme_tmp/docs" "$readme_tmp/scripts"
  cp README.md "$readme_tmp/"; cp scripts/check-links.py "$readme_tmp/scripts/"
  cp docs/*.md "$readme_tmp/docs/"; cp -r lessons "$readme_tmp/"
}
readme_fresh
printf '\nSee [the missing page](docs/no-such-page.md).\n' >>"$readme_tmp/README.md"
readme_broken "a link to a file that does not exist" "no-such-page.md: no such file"
readme_fresh
printf '\nSee [a section](testing.md#no-such-heading).\n' >>"$readme_tmp/docs/training.md"
readme_broken "a link to an anchor no heading makes" "no heading of docs/testing.md makes #no-such-heading"
readme_fresh
while [ "$(wc -l <"$readme_tmp/README.md")" -le 250 ]; do echo >>"$readme_tmp/README.md"; done
readme_broken "a README over 250 lines" "more than 250"
rm -rf "$readme_tmp"

# The flags docs/training.md names, against the programs' --help: in its prose, and in the command
# lines of its code blocks (not in the programs' output pasted there).
readme_help=$tmp/readme_help.txt
: >"$readme_help"
for tool in tp_train tp_generate tp_preflight tp_tokenize tp_export tp_bench; do
  [ -x "$BUILD/bin/$tool" ] && "$BUILD/bin/$tool" --help >>"$readme_help" 2>&1
done
# The elastic supervisor (a script): the flags its --help names, one a line as the tools list them.
scripts/tp-run --help 2>&1 | grep -o -- '--[a-z][a-z0-9-]*' | sed 's/^/  /' >>"$readme_help"
if ! grep -q '^usage: tp_train' "$readme_help"; then
  echo "· README: the tools are not built ($BUILD/bin/tp_train), so the flags of docs/training.md are not checked"
else
  # Not the tools': mpirun's, srun's, Open MPI's, MPICH's configure, update-alternatives',
  # install-deps.sh's and Megatron's flags the page names, and --help itself.
  readme_missing=$(awk '/^ *(```|~~~)/ { code = !code; next }
                        !code || /build\/bin\/|^ *(mpirun|make|srun) / { print }' docs/training.md |
    grep -o -- '--[a-z][a-z0-9-]*' | sort -u | while read -r flag; do
      case $flag in --oversubscribe | --bind-to | --allow-run-as-root | --mpi | --mca | --prefix | \
        --display | --openmpi | --train-iters | --host | --exclude | --kill-on-bad-exit | \
        --with-ft | --help) continue ;; esac
      grep -q -- "^ *$flag\b" "$readme_help" || echo "$flag"
    done | tr '\n' ' ')
  if [ -z "$readme_missing" ]; then
    pass 1; echo "✓ README: every --flag docs/training.md names is in a program's --help"
  else
    fail "docs/training.md names flags no program's --help lists: $readme_missing"
  fi
fi
