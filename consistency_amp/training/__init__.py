"""Training: the models, OT-GRPO (TRL's GRPOTrainer on paired prompts), run folders, the training entry and the spatial bases' pretraining; imports world, reward and the top level."""
