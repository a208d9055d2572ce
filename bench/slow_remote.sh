#!/usr/bin/env bash
# What a silent or trickling remote costs: `kart build smoke` and `kart fetch smoke` in
# a copy of the repository's kart.toml and smoke kernel, against (a) no remote, (b) a
# loopback server that accepts connections and never answers, (c) one that sends
# headers and then a byte a second. Default clocks (3 s connect, 5 s first byte, 5 s
# stall). Usage: bench/slow_remote.sh [path to kart]   (run from the repository root)
set -euo pipefail
kart=$(realpath "${1:-target/release/kart}")
export KART_NVCC=${KART_NVCC:-$PWD/.toolchain/py/nvidia/cu13/bin/nvcc}   # the pinned one, from scripts/setup
repo=$PWD
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
server() {  # mode port: a stand-in server (nginx cannot be made silent)
  python3 - "$1" "$2" <<'PY' &
import socket, sys, threading, time
mode, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(64)
def serve(c):
    c.recv(4096)
    try:
        if mode == "trickle":
            c.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            for _ in range(600):
                c.sendall(b"x"); time.sleep(1)
        else:
            time.sleep(600)
    except OSError:
        pass  # kart hung up: that is the point
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
project() {  # dir url
  mkdir -p "$1/kernels"
  cp -r "$repo/kernels/smoke" "$1/kernels/"
  printf '[project]\ntargets = ["sm_80", "sm_90"]\n\n[toolchain]\nnvcc = "13.0"\n' > "$1/kart.toml"
  [[ -n $2 ]] && printf '\n[remote]\nurl = "%s"\ntrusted = true\n' "$2" >> "$1/kart.toml"
  true
}
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>"$work/last.err" || true; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}'; }
echo "kart: ${1:-target/release/kart} ($("$kart" --version)); commit $(git -C "$repo" rev-parse --short HEAD); $(nproc) cores"
project "$work/local" ""
# Warm the store's toolchain fingerprint and smoke gate once, outside the timings.
(cd "$work/local" && "$kart" -q build smoke >/dev/null 2>&1 && rm -rf artifacts/v1/blobs artifacts/v1/actions)
local_s=$(cd "$work/local" && seconds "$kart" build smoke --no-remote)
echo "local build (no remote):           ${local_s} s"
for mode in silent trickle; do
  port=$(free_port); server "$mode" "$port"; sleep 0.5
  project "$work/$mode" "http://127.0.0.1:$port/kart"
  cp -r "$work/local/artifacts" "$work/$mode/" && rm -rf "$work/$mode/artifacts/v1/blobs" "$work/$mode/artifacts/v1/actions"
  b=$(cd "$work/$mode" && seconds "$kart" build smoke)
  echo "build, $mode remote:              ${b} s ($(awk -v a="$local_s" -v b="$b" 'BEGIN {printf "%.2f", b - a}') s over local)"
  grep -m1 "warning" "$work/last.err" | cut -c1-200
  cp "$work/$mode/kart.lock" "$work/$mode/kart.lock.built"; rm -rf "$work/$mode/artifacts/v1/blobs"
  f=$(cd "$work/$mode" && seconds "$kart" fetch smoke)
  echo "fetch, $mode remote:              ${f} s"
  grep -m2 "error" "$work/last.err" | cut -c1-200
done
