"""Write docs/functions.md from the table of scalar functions (tests/special_table.py)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    """Regenerate ``docs/functions.md``."""
    sys.path.insert(0, str(ROOT / "tests"))
    import special_table

    (ROOT / "docs" / "functions.md").write_text(special_table.markdown())


if __name__ == "__main__":
    main()
