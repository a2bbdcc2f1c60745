"""Fast worker tests: no model weights, no network."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# pytest puts this directory, not the repository root, on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
