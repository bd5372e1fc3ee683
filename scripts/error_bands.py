"""Regenerate estimator/formats/error_bands_data.py from the validation data: python scripts/error_bands.py"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from estimator.validation.bands import render  # noqa: E402

if __name__ == "__main__":
    path = Path(__file__).resolve().parents[1] / "estimator" / "formats" / "error_bands_data.py"
    path.write_text(render(), encoding="utf-8")
    print(f"wrote {path}")
