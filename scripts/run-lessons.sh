#!/usr/bin/env bash
# run-lessons.sh — runs every lesson in order, each under mpirun with its own rank count
# (lessons/lessons.txt). Exit 0 when every lesson ends in PASSED.
set -u
cd "$(dirname "$0")/.." || exit 2
. scripts/common.sh
fail=0
while read -r name np; do
  echo
  echo "================ lesson $name  ($MPIEXEC -np $np $BUILD/bin/lesson_$name)"
  # shellcheck disable=SC2086
  timeout 300 "$MPIEXEC" $MPI_FLAGS -np "$np" "$BUILD/bin/lesson_$name" </dev/null || { echo "lesson $name FAILED"; fail=1; }
done < <(lesson_list)
exit $fail
