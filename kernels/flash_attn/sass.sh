#!/usr/bin/env bash
# SASS facts of every sm_90 FlashAttention cubin of kart.lock (run on a machine with
# cuobjdump, from the repository root, kart on the PATH): tensor-core instructions
# (HMMA), shared-memory matrix loads (LDSM), async copies (LDGSTS), local memory
# (LDL/STL: spills) and barriers, counted in the disassembly.
set -euo pipefail
printf '%-62s %6s %6s %7s %5s %5s %5s\n' config HMMA LDSM LDGSTS LDL STL BAR
kart ls --json | python3 -c '
import json, sys
for a in json.load(sys.stdin):
    if a["kernel"] == "flash_attn" and a["target"] == "sm_90" and a["kind"] == "cubin":
        print(",".join(f"{k}={v}" for k, v in a["config"].items()))
' | while read -r config; do
  args=()
  IFS=, read -ra pairs <<< "$config"
  for p in "${pairs[@]}"; do args+=(-p "$p"); done
  cubin=$(kart -q path flash_attn "${args[@]}" --target sm_90)
  sass=$(cuobjdump -sass "$cubin")
  count() { grep -cE "$1" <<< "$sass" || true; }
  printf '%-62s %6s %6s %7s %5s %5s %5s\n' "$config" "$(count 'HMMA')" "$(count 'LDSM')" \
    "$(count 'LDGSTS')" "$(count '\bLDL')" "$(count '\bSTL')" "$(count 'BAR')"
done
