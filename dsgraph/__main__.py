import sys

from dsgraph.cli import main

sys.exit(main())
