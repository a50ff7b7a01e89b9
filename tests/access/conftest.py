"""The access tests' shared checks (`access_checks`), importable by every door's test."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # for access_checks
