from __future__ import annotations

from salvagelane.cli import console_main

console_main()
