"""Experiments: evaluation, the registry of the paper's runs, the figures, the science table and the miniature experiment."""
