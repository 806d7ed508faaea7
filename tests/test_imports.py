"""Every exported module imports in a fresh interpreter (no hidden dependence on notebook state or import order)."""
import subprocess, sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "consistency_amp"
MODULES = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")

def test_modules_found():
    assert "verifiers" in MODULES and "pairing" in MODULES

@pytest.mark.parametrize("name", MODULES)
def test_fresh_import(name):
    res = subprocess.run([sys.executable, "-c", f"import consistency_amp.{name}"], capture_output=True, text=True)
    assert res.returncode == 0, f"import consistency_amp.{name} failed:\n{res.stderr[-3000:]}"
