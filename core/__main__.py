import sys

from tercet.cli import main

sys.exit(main())
