"""Evaluation: a model's, a run's or your own pairs' answers to held-out questions, greedy, sampled or through vLLM (Section 5.1); imports from training, world, reward and the top level."""
