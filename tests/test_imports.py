"""Every exported module imports in a fresh interpreter (no hidden dependence on notebook state or import order)."""
import subprocess, sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "consistency_amp"
MODULES = sorted(".".join(p.relative_to(PKG).with_suffix("").parts) for p in PKG.rglob("*.py")
                 if p.stem not in ("__init__", "_modidx"))

def test_modules_found():
    assert "reward.verifiers" in MODULES and "reward.pairing" in MODULES and "core" in MODULES

@pytest.mark.parametrize("name", MODULES)
def test_fresh_import(name):
    res = subprocess.run([sys.executable, "-c", f"import consistency_amp.{name}"], capture_output=True, text=True)
    assert res.returncode == 0, f"import consistency_amp.{name} failed:\n{res.stderr[-3000:]}"
