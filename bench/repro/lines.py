"""Line timings of named assignor functions on one shape (needs line-profiler, not a project
dependency: pip install line-profiler): python bench/repro/lines.py FUNC[,FUNC] SHAPE-ARGS..."""
import runpy
import sys
from pathlib import Path

from line_profiler import LineProfiler

sys.path.append(str(Path(__file__).resolve().parents[2]))
import assignor.flow as flow  # noqa: E402
import assignor.target as target  # noqa: E402

lp = LineProfiler()
for name in sys.argv[1].split(","):
    owner = target
    parts = name.split(".")
    if parts[0] == "flow":
        owner, parts = flow, parts[1:]
    for part in parts[:-1]:
        owner = getattr(owner, part)
    fn = getattr(owner, parts[-1])
    wrapped = lp(fn)
    setattr(owner, parts[-1], wrapped)
sys.argv = ["shape.py", *sys.argv[2:]]
runpy.run_path(str(Path(__file__).resolve().parent / "shape.py"), run_name="__main__")
lp.print_stats(stream=sys.stderr, output_unit=1e-3, stripzeros=True)
