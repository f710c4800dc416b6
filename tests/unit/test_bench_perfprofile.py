"""bench/perfprofile.py: each perf sample goes to the innermost Python function on its stack
(its C callees included), the event loop's own code apart.  Correctness only (no timing)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from bench.perfprofile import LOOP, fold, record, report

# `perf script -F ip,sym`: a header line, then the frames, innermost first; a blank line
SCRIPT = """switchboard
\t    7f0001 __libc_write
\t    7f0002 _PyEval_EvalFrameDefault
\t    7f0003 py::RequestResponseCycle.send:/v/site-packages/uvicorn/protocols/http/httptools_impl.py
\t    7f0004 _PyEval_EvalFrameDefault
\t    7f0005 py::ProxyResponse.__call__:/w/app/pipeline.py

switchboard
\t    7f0002 _PyEval_EvalFrameDefault
\t    7f0005 py::ProxyResponse.__call__:/w/app/pipeline.py

switchboard
\t    8f0001 uv__io_poll
\t    8f0002 uv_run

switchboard
\t    8f0001 uv__run_timers
\t    7f0009 py::Runner.run:/p/lib/python3.12/asyncio/runners.py

switchboard
\t    7f0001 __libc_write
\t    7f0003 py::RequestResponseCycle.send:/v/site-packages/uvicorn/protocols/http/httptools_impl.py
"""


def test_each_sample_goes_to_its_innermost_python_function() -> None:
    n, counts = fold(SCRIPT)
    assert n == 5
    assert counts == {
        "RequestResponseCycle.send (httptools_impl.py)": 2,  # the write it called is its own
        "ProxyResponse.__call__ (pipeline.py)": 1,
        LOOP: 2,  # no Python frame, and Runner.run alone
    }
    table = report(n, counts, top=2).splitlines()
    assert table[0] == "5 samples"
    assert table[4:] == ["| 40.00% | RequestResponseCycle.send (httptools_impl.py) |", f"| 40.00% | {LOOP} |"]


def test_a_real_recording_names_the_proxys_functions() -> None:
    # perf is part of this machine's image: its absence fails here, loudly
    assert shutil.which("perf") is not None, "perf is not installed (Debian: linux-perf)"
    n, counts = record(str(Path(sys.executable)), "st-chat-n20", 200, 1000, warm=20)
    assert n > 0
    named = [name for name in counts if name != LOOP]
    # the proxy's own code is in the samples, by name
    assert any(name.endswith(("(pipeline.py)", "(bridge.py)")) for name in named), counts
