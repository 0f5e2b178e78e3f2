#!/usr/bin/env bash
# seed-build.sh FROM TO — start the build folder TO (another MPI's build: make openmpi-quick's
# build-openmpi/) with the objects of FROM (build/) that no MPI header reaches.
#
# Two builds that differ only in the MPI compiler wrapper compile every file with the same g++ and
# the same flags; the wrappers add only MPI's include and library paths (`mpicxx -show`). A file
# whose dependency list (-MMD's .d) names no mpi.h therefore compiles to the same object under
# either MPI: all of lib/ and cpu_backend/, the lessons and most tests. Copying those saves most of
# TO's cold build (CI: four fifths of the Open MPI build's compile time). Taken: an object TO lacks,
# newer than every file its .d lists (so FROM had it up to date), outside the GPU backend and the
# CUDA emulator (make openmpi-quick builds without them). Its .d is rewritten to name TO's object.
# The objects land with the time of the copy, so run this after TO's MPI stamp ($TO/mpi-impl)
# exists, or make would see them as older than the stamp and compile them again.
#
# Both folders must come from the same flags (no SANITIZE in one only, the same CXXFLAGS_EXTRA);
# make openmpi-quick calls it only for an unsanitized build.
set -eu
from=${1:?usage: seed-build.sh FROM TO}
to=${2:?usage: seed-build.sh FROM TO}
[ -d "$from/obj" ] || exit 0
[ -f "$from/onednn" ] && [ ! -e "$to/onednn" ] && mkdir -p "$to" && cp "$from/onednn" "$to/onednn"
# up_to_date D O: O is newer than every prerequisite its dependency file D lists.
up_to_date() {
  local dep
  # shellcheck disable=SC2013  # the .d lists file names separated by spaces: words, not lines
  for dep in $(sed -e '1s/^[^:]*://' -e 's/\\$//' -e '/^[^ ].*:$/d' "$1"); do
    [ "$dep" -nt "$2" ] && return 1
  done
  return 0
}
n=0
while IFS= read -r d; do
  o=${d%.d}.o
  rel=${o#"$from"/}
  if [ ! -f "$o" ] || [ -e "$to/$rel" ]; then continue; fi
  grep -qE '(^|[ /])mpi\.h' "$d" && continue
  up_to_date "$d" "$o" || continue
  mkdir -p "$(dirname "$to/$rel")"
  cp "$o" "$to/$rel"
  first=$(head -1 "$d")
  { printf '%s\n' "$to/${first#"$from"/}"; tail -n +2 "$d"; } >"$to/${rel%.o}.d"
  n=$((n + 1))
done < <(find "$from/obj" -name '*.d' -not -path '*/emu/*' -not -path '*/gpu_backend/*' | sort)
[ $n = 0 ] || echo "· $to: $n objects taken from $from (no MPI header reaches them: the same under any MPI)"
