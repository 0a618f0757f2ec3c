"""The public path finds NIH's tables without importing torch (docs/public_data.md, "Install and
download"): torchxrayvision's wheel installed with ``--no-deps`` is enough, and a missing table's
error names this interpreter and the exact install line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from chexpercept.curation.sources import base as sources_base
from chexpercept.errors import InputError

# A meta-path finder that refuses every torch import (as where torch is not installed); the
# lookup finds torchxrayvision's folder without running the package (checked via sys.modules).
_BLOCKED = textwrap.dedent("""
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top == "torch":
                raise ImportError(f"{name} blocked by the test")
            return None
    sys.meta_path.insert(0, _Block())
""")


@pytest.mark.skipif(sources_base.installed_tables_dir() is None,
                    reason="torchxrayvision's wheel is not installed (bash setup.sh installs it)")
def test_nih_tables_are_found_with_torch_not_importable():
    code = _BLOCKED + textwrap.dedent("""
        import importlib.util
        from chexpercept.curation.sources.nih import BOX_TABLE, IMAGE_TABLE
        from chexpercept.curation.sources.base import find_table
        box = find_table(None, BOX_TABLE, what="NIH box table")
        image = find_table(None, IMAGE_TABLE, what="NIH image table")
        assert box.is_file() and image.is_file(), (box, image)
        assert "torch" not in sys.modules and "torchxrayvision" not in sys.modules
        print(box.name, image.name)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_missing_table_names_interpreter_and_install_line(monkeypatch):
    monkeypatch.setattr(sources_base, "installed_tables_dir", lambda: None)
    with pytest.raises(InputError) as caught:
        sources_base.find_table(None, ("BBox_List_2017.csv",), what="NIH box table")
    message = str(caught.value)
    assert sys.executable in message
    assert f"{sys.executable} -m pip install --no-deps torchxrayvision==1.5.7" in message
    assert "not installed" in message
