"""The text causal-LM family: Hugging Face ``AutoModelForCausalLM`` policies (GGUF, folders, run folders, Hub ids).

Its sampling backends (``grpokit.rollout``) and model plumbing (``grpokit.model``) are shared with
the vision-language family, which is a causal LM with image and video inputs.
"""
