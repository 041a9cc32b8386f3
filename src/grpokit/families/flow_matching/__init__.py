"""Flow-matching image policies (Flow-GRPO, arXiv 2505.05470): model, SDE sampler, log-probs, rewards, pretraining."""
