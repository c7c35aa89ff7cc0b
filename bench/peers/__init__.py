"""Side by side with the peers (issue 15): the same releases under Flagger and under our operator
on the same sandbox, measured from outside.  ``python -m bench.peers`` (``make bench-peers``);
method and results in docs/benchmarks.md §5.

The other benchmarks are scripts that import ``common`` from ``bench/``; this package puts that
directory on the path so it shares them (the operator export, the route observer, the probe)."""

import sys
from pathlib import Path

_BENCH = str(Path(__file__).resolve().parents[1])
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)
