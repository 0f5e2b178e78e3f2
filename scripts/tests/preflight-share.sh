# preflight-share.sh — tp_preflight's 30 % warning is on communication's share of the step,
# comm / (comm + compute), the rule of [A1] §6 and [A2] §6.4 (docs/sources.md): Qwen3-8B at t = 8
# on NVLink is 29 % (1.21 ms against 2.96 ms: no warning, though comm / compute is 0.41), 34 % with
# --sp (the re-gathers in backward: a warning that names the share). Sourced by run-tests.sh.
expect "tp_preflight: Qwen3-8B at t = 8 is a 29% share" 0 "29%" 1 "$BUILD/bin/tp_preflight" --model qwen3-8b -t 8
share_log=$logs/check_tp_preflight_share_no_warning.log
"$BUILD/bin/tp_preflight" --model qwen3-8b -t 8 >"$share_log" 2>&1
if ! grep -q "# problems: 0" "$share_log"; then
  fail "tp_preflight: Qwen3-8B at t = 8 did not run (see $share_log)"
elif grep -q "communication is" "$share_log"; then
  fail "tp_preflight: Qwen3-8B at t = 8 (a 29% share) must not warn (see $share_log)"
else
  pass 1
fi
expect "tp_preflight: Qwen3-8B at t = 8 with SP warns at 34%" 0 "communication is 34% of each layer's step even on NVLink" 1 \
  "$BUILD/bin/tp_preflight" --model qwen3-8b -t 8 --sp
