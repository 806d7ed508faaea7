"""The miniature science: the experiment's design, runner and report, the science table, the per-task ablations and the controlled SSL baselines; imports from every layer below."""
