#!/usr/bin/env bash
# Regenerate the Python code for EVERY .proto under proto/ (except proto/released/):
# messages (*_pb2.py), gRPC stubs (*_pb2_grpc.py) and mypy-protobuf type stubs (*.pyi).
# Usage: scripts/gen_proto.sh [OUT_DIR]   (default: the repository root; the check script
# generates into a temporary directory and compares).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="${1:-$ROOT}"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
# protoc-gen-mypy / protoc-gen-mypy_grpc live beside the interpreter.
export PATH="$(dirname "$PYTHON"):$PATH"
mapfile -t PROTOS < <(cd proto && find . -name '*.proto' -not -path './released/*' | sed 's|^\./||' | LC_ALL=C sort)
if [ "${#PROTOS[@]}" -eq 0 ]; then
  echo "gen_proto: no .proto files under proto/" >&2
  exit 1
fi
mkdir -p "$OUT"
"$PYTHON" -m grpc_tools.protoc -I proto \
  --python_out="$OUT" --grpc_python_out="$OUT" \
  --mypy_out="$OUT" --mypy_grpc_out="$OUT" \
  "${PROTOS[@]}"
# Every generated directory is a package (remote_leader/v1/, remote_leader/sidecar/v1/, ...).
for proto in "${PROTOS[@]}"; do
  dir="$(dirname "$proto")"
  while [ "$dir" != "." ] && [ "$dir" != "/" ]; do
    if [ ! -e "$OUT/$dir/__init__.py" ]; then
      if [ -e "$ROOT/$dir/__init__.py" ]; then
        cp "$ROOT/$dir/__init__.py" "$OUT/$dir/__init__.py"
      else
        echo '"""Generated protobuf/gRPC code (scripts/gen_proto.sh); do not edit."""' > "$OUT/$dir/__init__.py"
      fi
    fi
    dir="$(dirname "$dir")"
  done
done
echo "gen_proto: generated ${#PROTOS[@]} file(s) into $OUT"
