#!/usr/bin/env bash
# doxygen-lesson-filter.sh FILE — Doxygen input filter for lessons/NN_name/README.md: on the
# generated page, the program itself appears under "The program" (on GitHub the README links to
# main.cpp instead). Other files pass through unchanged.
f=$1
dir=$(dirname "$f")
if [ -f "$dir/main.cpp" ]; then
  rel=${dir#"$(pwd)/"}
  sed -e 's|\[main.cpp\](main.cpp)|main.cpp (below)|' \
      -e "s|^## Results|\\\\include{lineno} $rel/main.cpp\n\n## Results|" "$f"
else
  cat "$f"
fi
