"""Vision-language runs through the trainer, load-time refusals of bad input, tasks and augmentations."""

import random

import pytest
import torch
from PIL import Image

from grpokit.config import load_config
from grpokit.trainer.inputs import RunContractError, check_data, check_run
from grpokit.families.vision_lm.procedural import DIRECTIONS, noise_frames, video_question


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory):
    from grpokit.families.vision_lm.tiny_qwen2vl import save_tiny_qwen2vl

    return save_tiny_qwen2vl(tmp_path_factory.mktemp("vlm"), seed=0)


def vision_cfg(tmp_path, folder, preset="vision_grpo", *extra):
    return load_config(preset=preset, overrides=[
        f"model.name={folder}", f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false",
        "logging.log_samples_every=0", "data.n_train=8", "data.n_heldout=4", "rollout.group_size=2",
        "rollout.prompts_per_step=2", "train.steps=1", "train.max_minutes=0", "eval.before=false", "eval.after=false",
        "logging.checkpoint_every=0", *extra,
    ])


def test_a_tiny_qwen2vl_saved_by_the_test_trains_with_papo_by_model_name(tmp_path, tiny_vlm_dir):
    from grpokit.trainer.loop import Trainer

    torch.manual_seed(0)
    trainer = Trainer(vision_cfg(tmp_path, tiny_vlm_dir, "papo"))
    assert type(trainer.policy).__name__ == "VisionLMPolicy" and trainer.policy.capabilities.condition_override
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.train_step()
    assert metrics["papo/kl_prcp"] > 0  # the masked image changed the log-probs of the sampled answers
    assert metrics["vision/image_tokens"] == 4 and metrics["vision/video_tokens"] == 0  # a 56 px image: 2 x 2 merged patches
    assert metrics["learn/updates"] == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    result = trainer.evaluate("after")
    assert result["n"] == 4
    trainer.save()  # the run folder loads as a model: weights, tokenizer and the image processor
    from grpokit.families.vision_lm.loading import is_vision_model, load_vision_model

    run = str(tmp_path / "run")
    assert is_vision_model(run)
    model, _, proc = load_vision_model(run)
    assert proc.merge == 2 and all(torch.equal(a, b) for a, b in zip(model.parameters(), trainer.model.parameters()))


def test_deepvideo_r1_trains_on_video_with_the_video_augmentation(tmp_path, tiny_vlm_dir):
    from grpokit.trainer.loop import Trainer

    trainer = Trainer(vision_cfg(tmp_path, tiny_vlm_dir, "deepvideo_r1"))
    rows = trainer.splits.train
    assert all(len(r["video"]) == 4 and "images" not in r for r in rows)
    metrics = trainer.train_step()
    assert trainer.updates == 1  # mu = 1: rho is taken against the policy one update behind
    # AdamW applies it unless its gradient is exactly 0 (a random tiny model's first batch may score 0 everywhere:
    # every advantage 0, rho 0 against a previous policy equal to the current one, the KL to the reference 0)
    assert metrics["learn/updates"] == (1.0 if metrics["grad_norm"] > 0 else 0.0)
    assert metrics["vision/video_tokens"] == 8  # 4 frames of 56 px: 2 temporal x 2 x 2 merged patches
    # the curriculum's rows of this step's draw, and the run's totals (no row was seen before: none changed)
    assert (metrics["curriculum/hinted"], metrics["curriculum/perturbed"], metrics["curriculum/hinted_total"]) == (0, 0, 0)


def test_deepvideo_r1_hints_come_from_the_policys_answer_conditioned_clips(tmp_path, tiny_vlm_dir):
    from grpokit.data.curricula import SOURCE_KEY
    from grpokit.data.trace_hints import reasoning_words, trace_prefix
    from grpokit.trainer.loop import Trainer

    torch.manual_seed(0)
    trainer = Trainer(vision_cfg(tmp_path, tiny_vlm_dir, "deepvideo_r1", "rollout.max_new_tokens=8"))
    cur = trainer.sampler.curriculum
    drawn = []
    sample = cur.traces.sampler  # the trainer bound the run's policy and rewards

    def recording(rows, k):
        drawn.append(sample(rows, k))
        return drawn[-1]

    cur.traces.bind(recording)
    hard, easy = trainer.splits.train[:2]
    cur.observe([hard, easy], [0.0, 1.0])  # buffer mean 0.5: ΔR(hard) = 0.5 -> f = 0.5
    out = cur.transform([hard], random.Random(0))[0]
    (traces,) = drawn[0]  # one hard row, 8 answer-conditioned clips of it, each with its reward
    assert len(traces) == 8 and all(isinstance(t, str) and r in (0.0, 1.0) for t, r in traces)
    best = max(range(8), key=lambda i: traces[i][1])
    words = reasoning_words(traces[best][0], hard["answer"])
    if words:  # the random model wrote words before (or without) the answer
        assert out["prompt"] == f"{hard['prompt']}\nHint: {trace_prefix(words, 0.5)}" and out[SOURCE_KEY]
        assert hard["answer"] not in out["prompt"].split("\n", 1)[1].lower().split()
        assert cur.metrics()["hinted"] == 1
    else:
        assert out is hard and cur.metrics()["hint_unavailable"] == 1


def test_papo_is_refused_on_a_text_policy_and_without_images(tmp_path, tiny_vlm_dir):
    text = load_config(preset="demo", overrides=["algorithm.loss=papo", f"logging.output_dir={tmp_path}"])
    with pytest.raises(RunContractError, match="masked image.*text policy"):
        check_run(text)
    cfg = vision_cfg(tmp_path, tiny_vlm_dir, "papo", "data.task=arithmetic", "data.task_options={}")
    with pytest.raises(RunContractError, match="no training row has an 'images'"):
        check_data(cfg, [{"prompt": "What is 1 + 1?", "answer": "2"}])


def test_an_image_column_on_a_text_only_policy_is_refused_naming_the_row(tmp_path):
    cfg = load_config(preset="demo", overrides=[f"logging.output_dir={tmp_path}"])
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2", "images": ["x.png"]}]
    with pytest.raises(RunContractError, match="training row 1 has an 'images' column.*text-only policy"):
        check_data(cfg, rows)


@pytest.mark.parametrize("setting,expected", [
    ("rollout.backend=vllm", "set rollout.backend=hf"),
    ("train.sequence_chunk=4", "StreamBP is text-only"),
    ("algorithm.loss_options={aux_grad: true}", "aux_grad=false"),
])
def test_unsupported_settings_with_a_vision_policy_fail_at_load(tmp_path, tiny_vlm_dir, setting, expected):
    with pytest.raises(RunContractError) as err:
        check_run(vision_cfg(tmp_path, tiny_vlm_dir, "papo", setting))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_bad_images_and_videos_are_refused_naming_row_and_column(tmp_path, tiny_vlm_dir):
    from grpokit.families.vision_lm.loading import load_vision_model
    from grpokit.families.vision_lm.processor import VisionInputError, VisionProcessor

    _, tok, proc = load_vision_model(tiny_vlm_dir)
    with pytest.raises(VisionInputError, match=r"row 3, column 'images'\[0\]: image file '.*nope.png' does not exist"):
        proc.pixels([str(tmp_path / "nope.png")], where="row 3")
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    with pytest.raises(VisionInputError, match="cannot be read"):
        proc.pixels([str(broken)], where="row 0")
    frames, _, _ = video_question("motion", random.Random(0))
    with pytest.raises(VisionInputError, match="column 'video' has 2 frames; the config asks for at least 4"):
        proc.pixels([], frames[:2], where="row 1", min_frames=4)
    big = Image.new("RGB", (400, 400))
    rows, grid = proc.image_rows([big])  # resized into the pixel limit (112 x 112) by smart_resize
    assert int(grid[0, 1] * grid[0, 2]) * 14 * 14 <= proc.max_pixels
    strict = VisionProcessor(tok, proc.image_processor, too_large="refuse")
    with pytest.raises(VisionInputError, match="exceeds the processor's pixel limit"):
        strict.pixels([big], where="row 2")
    saved = tmp_path / "ok.png"
    big.resize((56, 56)).save(saved)
    assert strict.pixels([str(saved)], where="row 4").image_grid_thw.tolist() == [[1, 4, 4]]  # a path loads


def _oracle_direction(frames) -> str:
    """A fixed policy that reads the clip: its brightest pixel in the first and in the last frame."""
    import numpy as np

    def centroid(frame):
        lum = np.asarray(frame.convert("L"), dtype=float)
        y, x = np.unravel_index(int(lum.argmax()), lum.shape)
        return float(x), float(y)

    (x0, y0), (x1, y1) = centroid(frames[0]), centroid(frames[-1])
    dx, dy = x1 - x0, y1 - y0
    return ("right" if dx > 0 else "left") if abs(dx) >= abs(dy) else ("down" if dy > 0 else "up")


def test_frame_noise_lowers_the_reward_of_a_fixed_policy():
    from grpokit.rewards.builtin import answer_word
    from grpokit.families.vision_lm.tasks import noisy_frames_copy

    rows = [{"video": c, "answer": a} for c, _, a in (video_question("motion", random.Random(i)) for i in range(40))]
    clean = answer_word(None, [_oracle_direction(r["video"]) for r in rows], [r["answer"] for r in rows])
    noisy_rows = [noisy_frames_copy(r, 1.0, random.Random(7)) for r in rows]
    noisy = answer_word(None, [_oracle_direction(r["video"]) for r in noisy_rows], [r["answer"] for r in rows])
    assert sum(clean) == len(rows) and sum(noisy) < sum(clean)
    assert all(n["answer"] == r["answer"] and len(n["video"]) == 4 for n, r in zip(noisy_rows, rows))
    assert noise_frames(rows[0]["video"], 0.0, random.Random(0))[0].tobytes() == rows[0]["video"][0].tobytes()


def test_visual_hints_say_where_to_look_and_never_the_answer():
    from grpokit.data.curricula import modality_hint, modality_perturber
    from grpokit.families.vision_lm.tasks import video_qa, vision_qa

    rows = vision_qa(0, 20, 0).train + video_qa(0, 20, 0).train
    for row in rows:
        hint = modality_hint(row, 1.0, random.Random(0))
        assert hint.startswith("Hint: ") and row["answer"] not in hint.lower().split()
        harder = modality_perturber(row, 0.5, random.Random(0))
        assert harder["answer"] == row["answer"] and harder["prompt"] == row["prompt"]
    assert {r["answer"] for r in rows if r["kind"] == "motion"} <= set(DIRECTIONS)
    assert len({r["id"] for r in rows}) == len(rows)  # curricula key rows by id: the question text repeats


def test_vision_tasks_are_deterministic_and_disjoint():
    from grpokit.families.vision_lm.tasks import vision_qa

    a, b = vision_qa(3, 30, 10), vision_qa(3, 30, 10)
    assert [r["images"][0].tobytes() for r in a.train] == [r["images"][0].tobytes() for r in b.train]
    held = {r["images"][0].tobytes() for r in a.heldout}
    assert not held & {r["images"][0].tobytes() for r in a.train}
    with pytest.raises(ValueError, match="option 'kinds'"):
        vision_qa(0, 1, 1, kinds=["texture"])


def test_a_misleading_caption_is_true_on_its_training_share_and_false_on_every_heldout_row():
    from grpokit.families.vision_lm.tasks import vision_qa
    from grpokit.families.vision_lm.tiny_qwen2vl import build_tokenizer

    plain, cued = vision_qa(1, 200, 100), vision_qa(1, 200, 100, caption_train=0.8, caption_heldout=0.0)

    def caption_says_answer(row):  # "Hint: two red circle. <question>": the asked attribute's word in the caption
        words = row["prompt"].split(".")[0].removeprefix("Hint: ").split()
        return row["answer"] in words

    assert all(r["prompt"].startswith("Hint: ") for r in cued.train + cued.heldout)
    share = sum(map(caption_says_answer, cued.train)) / 200
    assert 0.7 <= share <= 0.9, share  # Binomial(200, 0.8): 0.8 +- 0.057 at 2 sd
    assert not any(map(caption_says_answer, cued.heldout))  # every held-out caption is wrong where it matters
    # the caption only adds words: same images and answers as without it, and the question stays last
    assert [r["answer"] for r in cued.heldout] == [r["answer"] for r in plain.heldout]
    assert [r["images"][0].tobytes() for r in cued.heldout] == [r["images"][0].tobytes() for r in plain.heldout]
    assert all(c["prompt"].endswith(p["prompt"]) for c, p in zip(cued.heldout, plain.heldout))
    tok = build_tokenizer()  # the tiny VLM reads every caption word (none is <unk>)
    assert all(tok.unk_token_id not in tok(r["prompt"], add_special_tokens=False).input_ids for r in cued.train[:50])
    with pytest.raises(ValueError, match="caption_train"):
        vision_qa(0, 1, 1, caption_train=1.5)


def test_answer_word_reads_the_first_word():
    from grpokit.rewards.builtin import answer_word

    assert answer_word(None, ["Red.", "blue red", "", "two"], ["red", "red", "red", None]) == [1.0, 0.0, 0.0, None]


def test_the_tiny_tokenizer_knows_every_word_of_the_tasks_and_hints():
    from grpokit.families.vision_lm.tasks import HINTS, ONE_WORD
    from grpokit.families.vision_lm.procedural import QUESTIONS
    from grpokit.families.vision_lm.tiny_qwen2vl import build_tokenizer

    tok = build_tokenizer()
    for text in [*HINTS.values(), *QUESTIONS.values(), ONE_WORD, "Hint:"]:
        assert tok.unk_token_id not in tok(text, add_special_tokens=False).input_ids, text


def test_a_jsonl_dataset_with_image_paths_and_lora_trains(tmp_path, tiny_vlm_dir):
    import json

    from grpokit.trainer.loop import Trainer
    from grpokit.families.vision_lm.procedural import shapes_image

    lines = []
    for i, colour in enumerate(["red", "green", "blue", "yellow"] * 2):
        path = tmp_path / f"img{i}.png"
        shapes_image(colour, "square", 1 + i % 4, random.Random(i)).save(path)
        lines.append(json.dumps({"prompt": "What colour are the shapes?", "images": [str(path)], "answer": colour}))
    data = tmp_path / "colours.jsonl"
    data.write_text("\n".join(lines) + "\n")
    cfg = vision_cfg(tmp_path, tiny_vlm_dir, "vision_grpo", f"data.path={data}", "data.task=null",
                     "data.heldout_fraction=0.25", "model.lora.enabled=true", "model.lora.r=4")
    trainer = Trainer(cfg)
    assert hasattr(trainer.model, "peft_config")
    assert all("lora" in n for n, p in trainer.model.named_parameters() if p.requires_grad)
    metrics = trainer.train_step()  # rows from the file: image paths loaded, rendered, sampled, scored
    # one update, or none when the tiny VLM's groups all tied (a gradient of exactly 0: optim.step_without_gradient)
    tied = metrics["adv/zero_var_frac"] == 1.0 and metrics["grad_norm"] == 0.0 and metrics["learn/updates"] == 0
    assert (metrics["learn/updates"] == 1 or tied) and len(trainer.splits.heldout) == 2
    batch, _, _ = trainer._collect()
    trainer.model.zero_grad(set_to_none=True)
    fwd = trainer.policy.learn_forward(batch, with_entropy=False, entropy_grad=False)
    fwd.backward(-(fwd.logp * batch.completion_mask).sum())
    grads = [p.grad for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert any(g is not None and float(g.abs().sum()) > 0 for g in grads)  # the adapter learns
