from __future__ import annotations

from salvagelane.cli import main

main()
