"""Training modes: how a run makes its steps (one package each; ``registry.py`` lists them)."""
