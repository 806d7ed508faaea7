"""The top-level API: `from consistency_amp import OTGRPOTrainer, OTGRPOConfig, ...` in a fresh interpreter, with
`import consistency_amp` itself importing neither torch nor TRL (the names load on first use)."""
import importlib
import json
import subprocess
import sys

import pytest

import consistency_amp


def fresh(code: str) -> dict:
    "Run `code` in a new interpreter; it prints one JSON object, returned here."
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_is_light_and_names_load_on_first_use():
    got = fresh("import json, sys, time\nt = time.perf_counter()\nimport consistency_amp\n"
                "light = time.perf_counter() - t\nheavy = [m for m in ('torch', 'trl', 'transformers') if m in sys.modules]\n"
                "from consistency_amp import OTGRPOTrainer, OTGRPOConfig\n"
                "print(json.dumps(dict(light=light, heavy=heavy, trl='trl' in sys.modules, "
                "trainer=OTGRPOTrainer.__module__, config=OTGRPOConfig.__name__)))")
    print(f"import consistency_amp: {got['light'] * 1e3:.0f} ms")
    assert got["heavy"] == [] and got["trl"] is True
    assert (got["trainer"], got["config"]) == ("consistency_amp.training.trainer", "OTGRPOConfig")


@pytest.mark.parametrize("name", consistency_amp.__all__)
def test_every_exported_name_is_its_modules_object(name):
    value = getattr(consistency_amp, name)
    assert value is getattr(importlib.import_module(consistency_amp._WHERE[name]), name)
    assert name in dir(consistency_amp)


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="'OTGRPOTrainr'"):
        consistency_amp.OTGRPOTrainr
    with pytest.raises(ImportError):
        exec("from consistency_amp import OTGRPOTrainr", {})
