"""Where the stack lives: this directory's parent (deploy/local), the checkout, the state
directory (./var, or AGORA_VAR for a second stack beside the first) and the virtualenv.

Paths are strings spelled as the shell spelled them (logical, unnormalised): they are written into
supervisord.conf and the rendered configuration byte for byte."""

import os

# The entry script passes its directory as `cd ... && pwd` spells it (symbolic links kept).
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
VAR = os.environ.get("AGORA_VAR") or f"{ROOT}/var"
VENV = f"{ROOT}/.venv"
PY = f"{VENV}/bin/python"
