#!/bin/bash
# usage: bench/repro/icount.sh ROOT SCENARIO.json   the instructions one `assign` call on the
# scenario costs with ROOT's assignor (valgrind's callgrind: a run that parses, warms the imports as
# bench_shapes.py does, and assigns, less one that does not assign). Deterministic under load,
# unlike wall time on these shared cores: the figure to compare two checkouts by. Compile ROOT's
# bytecode first (`python -m compileall ROOT/assignor`): these machines set PYTHONDONTWRITEBYTECODE,
# and compiling target.py in the run costs ~0.1 G. The hash seed is fixed: set and dict orders of
# strings change the work (never the result) by a few percent. Needs valgrind.
ROOT=$1; FILE=$2
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-$HERE/../../.venv/bin/python}"
count() {
  PYTHONHASHSEED=0 PYTHONPATH="$ROOT" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$PYTHON" -P -c "
import json, sys
import assignor
from assignor import assign
from assignor.scenario import parse_problem
problem = parse_problem(json.load(open(sys.argv[1])))
assign(problem.tasks[:20], problem.clients[:3], problem.config)  # the imports a first call makes, as the bench
getattr(assignor, 'preload', lambda: None)()
for _ in range(int(sys.argv[2])):
    assign(problem.tasks, problem.clients, problem.config)" "$FILE" "$1" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "$FILE $(( $(count 1) - $(count 0) ))"
