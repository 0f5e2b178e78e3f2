# pages.sh — sourced by scripts/run-tests.sh (section 8b): the lesson pages do not depend on a BLAS
# kernel's last digit. OpenBLAS picks its kernels by CPU (Haswell, SkylakeX, Sandybridge, …), and
# each sums in its own order; the pages were once written where it picked Haswell, and lessons 05,
# 07 and 12 then printed other last digits elsewhere (-0.0469525 vs -0.0469519, 0.00e+00 vs
# 8.18e-08). Section 3 checked every page under this machine's own kernel; here those three lessons
# (about 15 s together) run again under another one (OPENBLAS_CORETYPE) and their pages must still
# agree (scripts/lesson-pages.py check, within the tolerances it states). Lesson 14 runs too, its
# bf16 GEMMs also on another kernel: ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN off AVX512-BF16 and AMX,
# so they run as widened sgemm (its page once held bf16 losses to 4 decimals, written on a CPU with
# AMX, which an AMD CPU with AVX512-BF16 alone printed 3 units apart). The whole course under
# another kernel is `OPENBLAS_CORETYPE=Sandybridge make lesson-check` (.ci/run).

# The kernel section 3 ran on (this CPU's, or the one OPENBLAS_CORETYPE names) and another this CPU
# can run: Sandybridge (AVX) unless that is the one, then Haswell (AVX2); none without AVX (or on
# another architecture).
blas_core() {
  python3 -c 'import ctypes; lib = ctypes.CDLL("libopenblas.so.0"); lib.openblas_get_corename.restype = ctypes.c_char_p; print(lib.openblas_get_corename().decode())' 2>/dev/null
}
own_core=$(blas_core)
other_core=
if [ "$(uname -m)" = x86_64 ] && grep -qw avx /proc/cpuinfo; then
  if [ "${own_core,,}" != sandybridge ]; then other_core=Sandybridge
  elif grep -qw avx2 /proc/cpuinfo; then other_core=Haswell; fi
fi
if [ -z "$other_core" ]; then
  echo "· lesson pages under another BLAS kernel: none to try on this CPU (OpenBLAS runs ${own_core:-?}; Sandybridge and Haswell need AVX, AVX2), not counted"
else
  for name_np in 05_parallel_attention:2 07_transformer_block:2 12_tp_dp_grid:4 14_memory_stack:4; do
    name=${name_np%:*} np=${name_np#*:}
    log=$logs/lesson_${name}_$other_core.log
    isa=; if [ "$name" = 14_memory_stack ]; then isa=AVX2; fi  # its bf16 GEMMs on widened sgemm
    if ! ( if [ -n "$isa" ]; then export ONEDNN_MAX_CPU_ISA=$isa; fi
           OPENBLAS_CORETYPE=$other_core run_mpi "$np" "$BUILD/bin/lesson_$name" ) >"$log" 2>&1 ||
       ! grep -q '^PASSED' "$log"; then
      fail "lesson $name under OPENBLAS_CORETYPE=$other_core (-np $np): $(grep -E '^(FAILED|error|rank)' "$log" | head -1) (see $log)"
    elif python3 scripts/lesson-pages.py check "$name" "$log" >"$logs/page_${name}_$other_core.diff" 2>&1; then
      pass 1; echo "✓ lessons/$name/README.md agrees with the lesson run on OpenBLAS's $other_core kernels (section 3's: ${own_core:-?})${isa:+, oneDNN at most $isa}"
    else
      fail "lessons/$name/README.md differs from lesson $name run on OpenBLAS's $other_core kernels (see $logs/page_${name}_$other_core.diff)"
      cat "$logs/page_${name}_$other_core.diff"
    fi
  done
fi
