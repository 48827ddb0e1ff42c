#!/usr/bin/env python
"""Prediction entry point for the deepspeed launcher (see `python launch/predict.py --help`)."""

import sys

from dsgraph.train.predict import main

if __name__ == "__main__":
    sys.exit(main())
