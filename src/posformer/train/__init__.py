"""The Trainer and what it is made of: settings, batches, optimizer, checkpoints, metrics log, distributed."""
