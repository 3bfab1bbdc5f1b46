#!/usr/bin/env bash
# The wire contract: generated code is fresh, buf lint passes, and nothing breaks the last
# released proto (proto/released/v1.binpb; docs/protocol.md, "Cutting a release").
set -euo pipefail
cd "$(dirname "$0")/../.."
BUF="$(command -v buf || true)"
if [ -z "$BUF" ]; then
  echo "20-proto: buf not found (pip install buf-bin; it is in the dev extra)" >&2
  exit 1
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
bash scripts/gen_proto.sh "$TMP" > /dev/null 2>&1 || { bash scripts/gen_proto.sh "$TMP"; exit 1; }
# Compare every generated file, both ways: stale, missing or orphaned generated code fails.
list_generated() { (cd "$1" && find . -type f \( -name '*_pb2*.py' -o -name '*_pb2*.pyi' \) -not -path './.venv/*' -not -path './proto/*' | LC_ALL=C sort); }
stale=0
diff <(list_generated "$TMP") <(list_generated .) > "$TMP.list" || { echo "20-proto: generated file set differs (< expected, > committed):"; cat "$TMP.list"; stale=1; }
rm -f "$TMP.list"
while read -r file; do
  if [ -e "$file" ] && ! cmp -s "$TMP/$file" "$file"; then
    echo "20-proto: stale generated code: $file"
    stale=1
  fi
done < <(list_generated "$TMP")
if [ "$stale" -ne 0 ]; then
  echo "20-proto: run scripts/gen_proto.sh and commit the result" >&2
  exit 1
fi
"$BUF" lint proto
for image in proto/released/*.binpb; do
  [ -e "$image" ] || continue
  "$BUF" breaking proto --against "$image"
done
echo "20-proto: generated code fresh, lint and breaking checks pass"
