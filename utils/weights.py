"""Loading local model weights (``.pth`` / ``.pt`` / ``.bin``) without running code from them.

The one place a torch checkpoint is read (the CXAS and CheXmask-U anatomy models, SAM2). It is
always read with ``torch.load(..., weights_only=True)``: tensors, plain containers and numbers
only. A checkpoint that holds other pickled objects (a model class, an ``argparse.Namespace``,
or a payload that calls ``os.system``) is refused, never loaded with pickle: unpickling can run
any code the file names. The error names the file and points at the one-line conversion to a
weights-only file (docs/building.md, "Model weights"). torch is imported only when a file is
loaded.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

from utils.errors import InputError

#: Where the conversion of a checkpoint that needs pickle is documented.
CONVERSION_DOC = "docs/building.md, 'Model weights'"
#: The global a refused checkpoint names, in torch's message.
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def load_weights(path: str | Path, setting: str, *, map_location: Any = "cpu") -> Any:
    """What a weights-only checkpoint holds (a state dict or a dict holding one).

    Args:
        path: The checkpoint file.
        setting: The config key that named it (``anatomy.cxas_weights``), for the message.
        map_location: ``torch.load``'s ``map_location`` (a device name).

    Returns:
        The loaded object: tensors in dicts, lists and tuples, with numbers and strings.

    Raises:
        InputError: Naming ``setting`` and the file, if it holds pickled objects other than
            tensors and plain containers (it is not loaded; the message cites the conversion,
            docs/building.md, "Model weights"), or is no readable torch checkpoint.
    """
    import torch  # the caller has required it, with its own extra

    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = _GLOBAL.search(str(exc))
        if not found:
            raise InputError(f"{setting} {path}: not a readable torch checkpoint (its pickle "
                             f"data is damaged or not a checkpoint's)") from None
        raise InputError(
            f"{setting} {path}: the checkpoint holds pickled Python objects besides tensors "
            f"(it names {found.group(1)}), and unpickling them could run code from the file, "
            f"so it is not loaded. Convert it once into a weights-only file, on a machine "
            f"where you trust it, with the one-line command in {CONVERSION_DOC}, and point "
            f"{setting} at the result") from None
    except (RuntimeError, EOFError, ValueError, OSError) as exc:
        reason = str(exc).split(". ", 1)[0] or type(exc).__name__
        raise InputError(f"{setting} {path}: not a readable torch checkpoint ({reason})"
                         ) from None
