from __future__ import annotations

import os
import sys
from pathlib import Path

# Shared helpers live in tests/support; make them importable as `support`.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("PYWEFT_TEST", "1")
