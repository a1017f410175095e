"""tests/security imports the helpers of tests/integration (``_cli``, ``_provider_server``)
by module name, as the integration tests do."""

from __future__ import annotations

import sys
from pathlib import Path

_INTEGRATION = str(Path(__file__).resolve().parents[1] / "integration")
if _INTEGRATION not in sys.path:
    sys.path.insert(0, _INTEGRATION)
