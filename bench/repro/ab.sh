#!/bin/bash
# usage: bench/repro/ab.sh ROOT_A ROOT_B SHAPE-ARGS...   three runs each of shape.py, alternating between two
# checkouts' assignors; prints the min seconds of each (PYTHON: the interpreter, .venv's by default)
A=$1; B=$2; shift 2
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-$HERE/../../.venv/bin/python}"
for i in 1 2 3; do
  for r in $A $B; do
    echo "$r $(PYTHONPATH=$r "$PYTHON" "$HERE/shape.py" "$@" | sed 's/.*"s": \([0-9.]*\).*/\1/')"
  done
done | awk '{ if (!($1 in m) || $2 < m[$1]) m[$1] = $2; order[$1] = NR } END { for (r in m) print r, m[r] }' | sort
