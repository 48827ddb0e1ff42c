#!/usr/bin/env python
"""Training entry point for the deepspeed launcher (see `python launch/train.py --help`)."""

import sys

from dsgraph.train.main import main

if __name__ == "__main__":
    sys.exit(main())
