"""Isolated (Grappa) training: each rank trains on its own chunks, rotated every super-epoch."""
