"""The masked-diffusion LM family (LLaDA-style; diffu-GRPO, ESPO): mask predictor, sampler, likelihood estimators, tasks."""
