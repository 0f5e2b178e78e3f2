# overlap.sh — issue 25's --overlap chunked on tp_train (sourced by scripts/run-tests.sh, section 8b).
#
# Bad input: chunked with --sp, one line, exit 2. Then the 10-step loss curve at np 2 and np 3 with
# dropout: chunked follows none within 1e-6 relative at every step. (A row of a product is the same
# dot products in any block of rows, but OpenBLAS's small-matrix kernels round a row by the block's
# size at this model's tiny GEMMs: bit for bit only where the BLAS is block-invariant, which
# test_overlap's OverlapChunked checks for and then asserts.)

# 1. Bad input.
expect "--overlap chunked with --sp" 2 "overlap=chunked is for plain TP" 2 \
  "${tt[@]}" --overlap chunked --sp

# 2. The same loss curve.
for np in 2 3; do
  for mode in none chunked; do
    log_json=$tmp/overlap_${mode}_np$np.json
    rm -f "$log_json"  # --log-json appends
    run_mpi "$np" "${train[@]}" --steps 10 --dropout 0.1 --overlap "$mode" --log-json "$log_json" \
      >"$logs/overlap_${mode}_np$np.log" 2>&1 ||
      fail "tp_train --overlap $mode at -np $np exited non-zero (see $logs/overlap_${mode}_np$np.log)"
  done
  worst=$(paste <(losses "$tmp/overlap_none_np$np.json") <(losses "$tmp/overlap_chunked_np$np.json") |
    awk 'NF == 2 { d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d; n++ }
         END { if (n != 10) print "none"; else printf "%.2e", w }')
  if [ "$worst" != none ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-6) }'; then
    pass 1; echo "✓ --overlap chunked at -np $np: 10 losses of --overlap none within $worst (≤ 1e-6, dropout 0.1)"
  else
    fail "--overlap chunked at -np $np: losses differ from --overlap none by $worst (> 1e-6 or missing)"
  fi
done
