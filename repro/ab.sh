#!/bin/bash
# usage: repro/ab.sh ROOT_A ROOT_B SHAPE-ARGS...   three runs each, alternating; prints min seconds of each
A=$1; B=$2; shift 2
for i in 1 2 3; do
  for r in $A $B; do
    echo "$r $(PYTHONPATH=$r /work/main/.venv/bin/python /tmp/h24a/repro/shape.py "$@" | sed 's/.*"s": \([0-9.]*\).*/\1/')"
  done
done | awk '{ if (!($1 in m) || $2 < m[$1]) m[$1] = $2; order[$1] = NR } END { for (r in m) print r, m[r] }' | sort
