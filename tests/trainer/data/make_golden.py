"""Golden per-step metrics of the trainer at d3cb0f9 (before the Policy / LearnBatch seam) on the tiny model.

``python tests/trainer/data/make_golden.py OUT.json`` writes them; the test compares today's.
"""
import json, sys, tempfile
import torch
from grpokit.config import load_config
from grpokit.config.schema import OptimConfig
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.loop import Trainer

CASES = {
    "grpo": [],
    "grpo_mu2_beta": ["algorithm.num_iterations=2", "algorithm.beta=0.04"],
    "disco": ["algorithm.loss=disco", "algorithm.num_iterations=2"],
    "dapo": ["preset_dapo", "algorithm.overlong_cache=2"],
}
BASE = ["logging.progress=false", "logging.log_samples_every=0", "data.task=arithmetic", "data.n_train=20",
        "data.n_heldout=8", "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=6",
        "train.micro_batch_size=4", "eval.before=false", "eval.after=false", "optim.lr=0.001", "train.steps=3",
        "logging.checkpoint_every=0", "rewards=[{name: answer_match}, {name: length_target, kwargs: {target: 3, coef: 0.1}}]"]
# d3cb0f9 applied AdamW's update on an exactly-zero gradient (plain GRPO's step 3 here); later releases skip it
# unless optim.step_without_gradient, which these cases set to keep comparing that release's behaviour
PREVIOUS = ["optim.step_without_gradient=true"] if "step_without_gradient" in OptimConfig.__dataclass_fields__ else []


def run_cases():
  out = {}
  for name, sets in CASES.items():
      preset = None
      if sets and sets[0].startswith("preset_"):
          preset, sets = sets[0][7:], sets[1:]
      with tempfile.TemporaryDirectory() as d:
          cfg = load_config(preset=preset, overrides=BASE + PREVIOUS + sets + [f"logging.output_dir={d}", "model.name=tiny"])
          torch.set_num_threads(1)
          model, tok = tiny_model_and_tokenizer(seed=0)
          tr = Trainer(cfg, model=model, tokenizer=tok)
          steps = []
          for _ in range(3):
              m = tr.train_step()
              steps.append({k: v for k, v in m.items() if not k.startswith("time/") and k != "tokens_per_s"})
          out[name] = steps
  return out


if __name__ == "__main__":
    result = run_cases()
    json.dump(result, open(sys.argv[1], "w"), indent=1, sort_keys=True)
