#!/usr/bin/env bash
# What `kart toolchain install` costs on a fresh machine, and why it installs no 12.x.
# Run from the repository root after `scripts/setup`:  bench/toolchain_install.sh
# 1. A cold install of this repository's pins (nvcc 13.0 wheels, cuRAND, CUTLASS) into
#    an empty home, then a warm one (nothing to do), then a build of the smoke kernel
#    with it in a project made by `kart init`, digests compared with kart.lock's.
# 2. The bin/ folder of PyPI's nvcc wheels for 12.x (`nvidia-cuda-nvcc-cu12`).
# Paths under the temporary home are printed as $KART_HOME, not as this machine's.
set -euo pipefail
exec > >(sed -u "s#$(mktemp -u -d | xargs dirname)/tmp\.[A-Za-z0-9]*/#\$KART_HOME/#g")
kart=$(realpath target/release/kart)
echo "kart $(git rev-parse --short HEAD), $(nproc) cores, $(uname -m)"
home=$(mktemp -d)
proj=$(mktemp -d)
trap 'rm -rf "$home" "$proj"' EXIT
echo "== cold install of kart.toml's pins into an empty KART_HOME"
start=$(date +%s.%N)
KART_HOME=$home "$kart" toolchain install 2>&1 | grep -v '^downloading'
echo "wall: $(echo "$(date +%s.%N) - $start" | bc) s"
echo "== warm install (everything present)"
start=$(date +%s.%N)
KART_HOME=$home "$kart" toolchain install 2>&1
echo "wall: $(echo "$(date +%s.%N) - $start" | bc) s"
KART_HOME=$home "$kart" toolchain list
echo "== kart init + build of the smoke kernel with the installed nvcc, in another folder"
"$kart" init "$proj/p" >/dev/null 2>&1
(cd "$proj/p" && env -u KART_NVCC KART_HOME="$home" PATH=/usr/bin:/bin "$kart" toolchain install 2>&1 | grep -v "^downloading" && env -u KART_NVCC KART_HOME="$home" PATH=/usr/bin:/bin "$kart" build 2>&1 | tail -n 1)
for t in sm_80 sm_90; do
  made=$(grep -A6 "kernel = \"smoke\"" "$proj/p/kart.lock" | grep -A4 "target = \"$t\"" | grep digest | head -1)
  locked=$(grep -A6 "kernel = \"smoke\"" kart.lock | grep -A4 "target = \"$t\"" | grep digest | head -1)
  echo "smoke $t: init'd project $made; kart.lock $locked; $([[ $made == "$locked" ]] && echo same || echo DIFFERENT)"
done
echo "== PyPI's 12.x nvcc wheels: what their bin/ holds"
for v in 12.4.131 12.8.93 12.9.86; do
  python3 - "$v" <<'PY'
import json, sys, urllib.request, zipfile, io
v = sys.argv[1]
req = urllib.request.Request("https://pypi.org/simple/nvidia-cuda-nvcc-cu12/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(req))["files"]
f = next(f for f in files if f"-{v}-" in f["filename"] and "x86_64" in f["filename"])
data = urllib.request.urlopen(f["url"]).read()
names = zipfile.ZipFile(io.BytesIO(data)).namelist()
print(f"{f['filename']}: bin/ holds {[n for n in names if '/bin/' in n]}; cicc: {any(n.endswith('/cicc') for n in names)}")
PY
done
