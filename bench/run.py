"""`./dev.sh bench`: the emulator benchmark, then the pipeline benchmark (chain vs one pod per task vs all at
once). Extra arguments (e.g. --quick) are passed to both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    for script in ("bench_emulator.py", "pipelines.py"):
        code = subprocess.call([sys.executable, str(HERE / script), *sys.argv[1:]])
        if code:
            sys.exit(code)
