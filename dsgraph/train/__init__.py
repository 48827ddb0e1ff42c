"""Config section, DeepSpeed engine setup, the training loop, metrics and checkpoints."""
