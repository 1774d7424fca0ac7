"""The layout is the architecture: what each layer may import."""

from __future__ import annotations

import subprocess
import sys


def modules_loaded_by(module: str) -> list[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()


def test_settings_and_keys_import_nothing_from_the_decision() -> None:
    for module in ("semcache.settings", "semcache.keys"):
        loaded = modules_loaded_by(module)
        assert not [name for name in loaded if name.startswith("semcache.decision")], module


def test_nothing_below_the_web_layer_imports_it() -> None:
    for module in ("semcache.pipeline", "semcache.decision.verification", "semcache.tiers.semantic"):
        loaded = modules_loaded_by(module)
        assert not [name for name in loaded if name.startswith(("semcache.server", "fastapi"))], module
