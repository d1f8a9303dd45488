import sys

from tools.backup.cli import main

sys.exit(main())
