#!/usr/bin/env bash
# After the cluster launches, the lazy lock index, the canonical lock reader and the
# settled no-op build: every GPU test, then Runtime::open + load of one artifact of
# bench/scale.sh's project at 6,000 and 30,000 artifacts (the lock and that one blob
# carried, xz), 7 runs each (one process per run, as a program starting). Logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
echo "commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
rm -rf artifacts; tar -xzf .gpu/store.tgz && mv store artifacts
timeout 420 bash .gpu/run > $OUT/gpu-tests.log 2>&1; echo "gpu tests exit $?"
grep -E "^=== |^test result|passed|FAILED|skipped" $OUT/gpu-tests.log | tail -n 30
for n in 6k 30k; do
  d=$(mktemp -d); tar -xJf .gpu/open$n.txz -C "$d"
  echo "open_one --gpu (open_ms load_ms total_ms peak_rss_kb) at $n:" | tee -a $OUT/open-one.log
  for i in 1 2 3 4 5 6 7; do
    timeout 30 $B/open_one --gpu "$d/project" tiny 9.0 A=7 B=42 2>&1 | tee -a $OUT/open-one.log
  done
done
