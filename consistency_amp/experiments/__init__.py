"""The command lines under their first names (`python -m consistency_amp.experiments.experiment`, `.evaluate`, `.registry`): aliases that import their command only when run, and nothing else."""
