#!/usr/bin/env bash
# The local stack on one machine (make setup, up, down, test, ...): its commands are Python in
# deploy/local/stack/ (cli.py lists them), run by Debian's own python3 with the standard library
# alone, since `setup` is what makes the virtualenv.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=/usr/bin/python3
[ -x "$python" ] || python=python3
exec "$python" -I "$here/stack" "$@"
