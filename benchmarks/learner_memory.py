#!/usr/bin/env python
"""Peak memory of one learner step vs completion length: full logits, chunked head, StreamBP.

    python benchmarks/learner_memory.py                         # GRPO, 512 / 1024 / 2048 tokens, 2 rows
    python benchmarks/learner_memory.py --lengths 256,512 --rows 1 --chunk 128
    python benchmarks/learner_memory.py --objective sft --rows 1 --lengths 2048,4096,8000
    python benchmarks/learner_memory.py --objective dpo --rows 2 --lengths 2048,4096,8000   # one pair
    python benchmarks/learner_memory.py --ranks 1,2                # FSDP: per-rank training state at 1 and 2 ranks
    python benchmarks/learner_memory.py --fit-budget 1024 --threads 1   # longest T in 1 GiB: checkpointing vs StreamBP layer
    python benchmarks/learner_memory.py --dry-run                  # the --fit-budget path on a tiny random model (seconds)

One learner step = forward + backward of the objective on one micro-batch of ``rows`` completions of
one prompt, every completion exactly T tokens, on the embedded SmolLM2-135M-Instruct (fp32, full
fine-tune). Objectives (``--objective``): ``grpo`` (token-level ppo_clip, seq_mean_token_mean), ``sft``
(the registered ``sft`` loss: token-mean NLL) and ``dpo`` (the registered ``dpo`` loss, beta 0.1: the
rows are chosen / rejected halves, the reference log-probs precomputed, as the offline trainer has
them). StreamBP ("StreamBP: Memory-Efficient Exact Backpropagation for Long Sequence Training of
LLMs", arXiv 2506.03077, Sec. 3) serves all three the same way: the per-token log-probs ``[B, T]``
come out of the chunked forward as a leaf, the objective's gradient with respect to them is taken
whole (so DPO's non-additive ``-log sigmoid(beta c)`` needs no second pass), and that gradient is
pushed back chunk by chunk. Modes:

* ``logits``   — the textbook path: ``[B, T, V]`` logits, log-softmax chunked over T (grpokit before
                 the chunked head; what most trainers do);
* ``chunked``  — grpokit's default: the LM head runs from hidden states in row chunks, the logits
                 recomputed in its backward (``grpokit.model.chunked_head``);
* ``streambp`` — chunked head + sequence-chunked backprop through the layers over a kept KV cache
                 (``train.sequence_chunk``, ``train.streambp=cache``, ``grpokit.model.streambp``);
* ``checkpoint`` — chunked head + activation checkpointing of every decoder layer
                 (``train.activation_checkpointing``), through the policy's learner forward;
* ``layer``    — StreamBP's own scheme (``train.streambp=layer``, ``grpokit.model.streambp_layers``):
                 checkpointing at layer boundaries, each layer's backward recomputed and
                 back-propagated ``--chunk`` rows at a time, through the policy's learner forward.

Each (mode, T) runs in a fresh child process. Reported: the learner's peak extra memory =
peak RSS during the step minus RSS just before it (model, gradients already allocated, inputs
ready), and the step's seconds. The last line is machine-readable:
``streambp_vs_logits_at_<Tmax>=<ratio> chunked_vs_logits_at_<Tmax>=<ratio>``.

``--fit-budget MIB``: the paper's comparison (arXiv 2506.03077, Sec. 4: longest trainable sequence
at a memory budget). For each objective of ``--objectives`` (SFT: 1 row; DPO: 1 pair; GRPO: a
group of 2) and for ``checkpoint`` and ``layer``, the longest completion length T whose learner
extra memory stays within the budget: T doubles from ``--start`` until a step exceeds it (a child
stops itself once its RSS passes the budget), then bisects down to ``--resolution`` x T, in
multiples of 64. Prints a table and ``layer_vs_checkpoint_<objective>=<ratio>`` lines; ``--out DIR``
also writes ``fit.json``. ``--dry-run``: the same on grpokit's tiny random model with a tiny budget.

``--ranks 1,2``: the sharded learner (``distributed.learner=fsdp``, :mod:`grpokit.distributed.fsdp`)
under torchrun with N gloo ranks on CPU: one GRPO step (forward, backward, AdamW) of a micro-batch of
``--rows`` x ``--lengths[0]`` tokens per rank, then each rank's bytes of parameters, gradients and
optimizer state (its local shards, counted exactly) and its peak RSS during the step. The state
should fall close to 1/N; the last line is ``fsdp_state_ratio_<N>_vs_1=<ratio>``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MODES = ("logits", "chunked", "streambp")
FIT_MODES = ("checkpoint", "layer")  # gradient checkpointing alone vs StreamBP's layer scheme
FIT_ROWS = {"sft": 1, "dpo": 2, "grpo": 2}  # one sequence, one chosen/rejected pair, one group of 2
TAG = "LEARNER_MEMORY_JSON:"
OVER = 3  # a child's exit status when its RSS passed the budget


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(field)


def _load(model_name: str):
    """(model, tokenizer): the embedded SmolLM2 in fp32, or ``tiny``: grpokit's tiny random Llama (the dry run)."""
    if model_name == "tiny":
        from grpokit.testing import tiny_model_and_tokenizer

        return tiny_model_and_tokenizer(seed=0, hidden=64, layers=4)
    from grpokit.model.loading import load_model

    return load_model(model_name, dtype="float32")


def _stop_over_budget(before: float, budget: float) -> None:
    """A daemon thread that ends the process (exit status OVER) once RSS exceeds ``before + budget`` MiB."""
    import threading

    def watch() -> None:
        while True:
            if _status_mib("VmRSS") - before > budget:
                os._exit(OVER)
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True).start()


def child(mode: str, length: int, rows: int, chunk: int, objective_name: str = "grpo", model_name: str = "smollm2-135m-instruct",
          budget: float = 0.0) -> dict:
    """One learner step after a 16-token warm-up; prints (and returns) its result line."""
    import types

    import torch

    from grpokit.algos.objective import BatchTotals, ObjectiveTerms, grpo_objective
    from grpokit.algos.offline import OFFLINE_LOSSES, OfflineInputs
    from grpokit.algos.losses import LossInputs
    from grpokit.families.causal_lm.policy import CausalLMPolicy
    from grpokit.model.logprobs import completion_logprobs
    from grpokit.model.streambp import streamed_backward, streamed_forward
    from grpokit.registries import get_registry

    torch.manual_seed(0)
    model, tok = _load(model_name)
    model.train()
    for p in model.parameters():  # gradients exist before the step, as from the second step of training
        p.grad = torch.zeros_like(p)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Write a long story about a cat."}],
                                     tokenize=False, add_generation_prompt=True)
    p_ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids.repeat(rows, 1)
    p_mask = torch.ones_like(p_ids)
    c_ids = torch.randint(100, min(40000, model.config.vocab_size), (rows, length))
    c_mask = torch.ones_like(c_ids)
    group = torch.zeros(rows, dtype=torch.long)
    adv = torch.randn(rows)
    loss_fn, agg = get_registry("loss").get("ppo_clip"), get_registry("aggregation").get("seq_mean_token_mean")

    ref_logp = -torch.rand(rows, length) * 5  # DPO's reference log-probs: precomputed, no gradient
    offline = OFFLINE_LOSSES.get(objective_name) if objective_name != "grpo" else None

    def objective(logp, mask):
        if objective_name == "sft":
            return offline(OfflineInputs(logp=logp, mask=mask.float()), num_tokens=float(mask.sum()))[0]
        if objective_name == "dpo":
            return offline(OfflineInputs(logp=logp, mask=mask.float(), ref_logp=ref_logp[:, : logp.shape[1]]), beta=0.1, num_rows=rows / 2)[0]
        inp = LossInputs(logp=logp, old_logp=logp.detach(), adv=adv, mask=mask.float())
        terms = ObjectiveTerms(loss_fn, agg, loss_options={"epsilon_low": 0.2, "epsilon_high": 0.2})
        loss, _ = grpo_objective(inp, terms, BatchTotals(num_seqs=float(rows), num_tokens=float(mask.sum()), max_len=mask.shape[1]))
        return loss

    policy = CausalLMPolicy(model, tok, None, sequence_chunk=chunk if mode == "layer" else 0,
                            streambp="layer" if mode == "layer" else "cache", checkpoint=mode == "checkpoint")

    def step(args):
        if mode in FIT_MODES:  # what the trainers run: the policy's learner forward and its staged backward
            mb = types.SimpleNamespace(prompt_ids=args[0], prompt_mask=args[1], completion_ids=args[2], completion_mask=args[3],
                                       group_ids=group)
            out = policy.learn_forward(mb, with_entropy=False, entropy_grad=False)
            out.backward(objective(out.logp, args[3]))
        elif mode == "streambp":
            logp, _, state = streamed_forward(model, *args, group_ids=group, chunk=chunk)
            logp.requires_grad_()
            (g,) = torch.autograd.grad(objective(logp, args[3]), [logp])
            streamed_backward(model, *args, g, state)
        else:
            logp, _ = completion_logprobs(model, *args, group_ids=group, fused_head=mode == "chunked")
            objective(logp, args[3]).backward()

    step((p_ids, p_mask, c_ids[:, :16], c_mask[:, :16]))  # warm-up: weights paged in, kernels initialised
    args = (p_ids, p_mask, c_ids, c_mask)
    before = _status_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
        f.write("5")
    if budget > 0:
        _stop_over_budget(before, budget)
    t0 = time.perf_counter()
    step(args)
    seconds = time.perf_counter() - t0
    peak = _status_mib("VmHWM")
    result = {"objective": objective_name, "mode": mode, "T": length, "rows": rows, "before_mib": before, "peak_mib": peak,
              "extra_mib": peak - before, "seconds": seconds}
    print(TAG + json.dumps(result), flush=True)
    return result


def _local_bytes(t) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t  # a DTensor's own shard
    return local.numel() * local.element_size()


def fsdp_child(length: int, rows: int) -> None:
    """One sharded GRPO step on this torchrun rank; prints its state bytes and step peak RSS."""
    import torch

    from grpokit.config.schema import DistributedConfig
    from grpokit.distributed.fsdp import root_forward, shard_model
    from grpokit.model.loading import load_model
    from grpokit.model.logprobs import completion_logprobs

    torch.distributed.init_process_group("gloo")
    torch.manual_seed(0)
    model, _ = load_model("smollm2-135m-instruct", dtype="float32")
    model.train()
    shard_model(model, DistributedConfig(learner="fsdp"))
    logprobs = root_forward(model, completion_logprobs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    c_ids = torch.randint(100, 40000, (rows, length))
    p_ids = torch.randint(100, 40000, (rows, 16))
    group, adv = torch.zeros(rows, dtype=torch.long), torch.randn(rows)

    def step(t: int) -> None:
        logp, _ = logprobs(model, p_ids, torch.ones_like(p_ids), c_ids[:, :t], torch.ones_like(c_ids[:, :t]), group_ids=group)
        (-(logp * adv[:, None]).mean()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # gradients stay allocated: the state of every later step

    step(16)  # warm-up; AdamW's moments now exist
    before = _status_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t0 = time.perf_counter()
    step(length)
    seconds = time.perf_counter() - t0
    params = list(model.parameters())
    state = {
        "params": sum(_local_bytes(p) for p in params),
        "grads": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(_local_bytes(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)),
    }
    print(TAG + json.dumps({"rank": torch.distributed.get_rank(), "world": torch.distributed.get_world_size(),
                            **{k: v / 2**20 for k, v in state.items()}, "before_mib": before,
                            "peak_mib": _status_mib("VmHWM"), "seconds": seconds}), flush=True)
    torch.distributed.destroy_process_group()


def fsdp_report(ranks: list[int], length: int, rows: int, threads: int) -> None:
    """Launch :func:`fsdp_child` under torchrun at each rank count; print per-rank state and peak memory."""
    results = []
    for n in ranks:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n), __file__,
               "--_fsdp_child", str(length), "--rows", str(rows)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads or 1)}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [json.loads(ln.split(TAG, 1)[1]) for ln in out.stdout.splitlines() if TAG in ln]
        if len(lines) != n:
            print(out.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"fsdp child at {n} ranks failed")
        results += sorted(lines, key=lambda r: r["rank"])
    print(f"FSDP (gloo, CPU), SmolLM2-135M fp32, AdamW, one step of {rows} x {length} tokens per rank")
    print("| ranks | rank | params MiB | grads MiB | optimizer MiB | state MiB | step peak RSS MiB | s |")
    print("|---|---|---|---|---|---|---|---|")
    total = {}
    for r in results:
        state = r["params"] + r["grads"] + r["optimizer"]
        total.setdefault(r["world"], []).append(state)
        print(f"| {r['world']} | {r['rank']} | {r['params']:.0f} | {r['grads']:.0f} | {r['optimizer']:.0f} | {state:.0f} | "
              f"{r['peak_mib']:.0f} | {r['seconds']:.1f} |")
    one = max(total[min(total)])
    print(" ".join(f"fsdp_state_ratio_{n}_vs_{min(total)}={max(v) / one:.3f}" for n, v in sorted(total.items()) if n != min(total)))


def _probe(mode: str, length: int, rows: int, objective: str, a, budget: float = 0.0):
    """One learner step in a fresh child: its result dict, or None when it passed ``budget`` MiB (or died).

    The dry run's tiny model steps in this process (a child's imports would take longer than its step).
    """
    if a._model == "tiny":
        return child(mode, length, rows, a.chunk, objective, a._model)
    cmd = [sys.executable, __file__, "--_child", mode, str(length), "--rows", str(rows), "--chunk", str(a.chunk),
           "--objective", objective, "--_model", a._model, "--_budget", str(budget)]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith(TAG)), None)
    if line is not None:
        return json.loads(line[len(TAG):])
    if budget > 0 and out.returncode in (OVER, -9):  # over the budget (or killed for memory)
        return None
    print(out.stderr[-3000:], file=sys.stderr)
    raise SystemExit(f"child {mode} T={length} failed")


def longest_fit(mode: str, objective: str, a) -> tuple[int, list]:
    """(longest T within ``a.fit_budget`` MiB, every probe): doubling from ``a.start``, then bisection to ``a.resolution``."""
    rows, probes = FIT_ROWS[objective], []

    def fits(t: int) -> bool:
        r = _probe(mode, t, rows, objective, a, a.fit_budget)
        ok = r is not None and r["extra_mib"] <= a.fit_budget
        probes.append({"T": t, "fits": ok, "extra_mib": r["extra_mib"] if r else None, "seconds": r["seconds"] if r else None})
        print(f"{objective:4s} {mode:10s} T={t:6d} {'fits' if ok else 'over'}"
              + (f"  extra {r['extra_mib']:7.0f} MiB  {r['seconds']:6.1f} s" if r else ""), file=sys.stderr, flush=True)
        return ok

    lo, hi, t = 0, None, a.start
    while t <= a.max_len:
        if not fits(t):
            hi = t
            break
        lo, t = t, t * 2
    if hi is None:
        return lo, probes  # fits up to --max-len
    while hi - lo > max(64, a.resolution * lo):
        mid = (lo + hi) // 2 // 64 * 64
        if mid <= lo:
            break
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, probes


def fit_report(a) -> None:
    """The paper's comparison: per objective, the longest T within the budget, checkpointing alone vs StreamBP layer."""
    results = {}
    for objective in a.objectives.split(","):
        for mode in FIT_MODES:
            results[(objective, mode)] = longest_fit(mode, objective, a)
    model = "tiny random Llama (dry run)" if a._model == "tiny" else "SmolLM2-135M-Instruct fp32, full fine-tune"
    print(f"longest completion within {a.fit_budget:.0f} MiB of learner memory; {model}; StreamBP chunk {a.chunk}")
    print("| objective | rows | checkpointing alone | StreamBP layer | ratio |")
    print("|---|---|---|---|---|")
    lines = []
    for objective in a.objectives.split(","):
        ck, ly = results[(objective, "checkpoint")][0], results[(objective, "layer")][0]
        cap = lambda t: f">= {t}" if t >= a.max_len else str(t)  # noqa: E731 -- the search stopped at --max-len
        ratio = ly / ck if ck else float("inf")
        print(f"| {objective} | {FIT_ROWS[objective]} | {cap(ck)} | {cap(ly)} | {ratio:.2f} |")
        lines.append(f"layer_vs_checkpoint_{objective}={ratio:.3f}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "fit.json"), "w") as f:
            json.dump({f"{o}/{m}": {"longest": t, "probes": pr} for (o, m), (t, pr) in results.items()}, f, indent=1)
    print(" ".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="512,1024,2048", help="completion lengths T")
    p.add_argument("--rows", type=int, default=2, help="completions in the micro-batch (one prompt)")
    p.add_argument("--chunk", type=int, default=256, help="StreamBP chunk (train.sequence_chunk)")
    p.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES + FIT_MODES)}")
    p.add_argument("--objective", choices=("grpo", "sft", "dpo"), default="grpo",
                   help="the loss of the step (dpo: --rows must be even, chosen then rejected)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--ranks", default="", help="FSDP mode: comma-separated torchrun rank counts, e.g. 1,2")
    p.add_argument("--fit-budget", type=float, default=0.0, help="MiB of learner memory: longest T per objective (see above)")
    p.add_argument("--objectives", default="sft,dpo,grpo", help="--fit-budget: the objectives searched")
    p.add_argument("--start", type=int, default=256, help="--fit-budget: first T of the doubling search")
    p.add_argument("--max-len", type=int, default=65536, help="--fit-budget: stop doubling here")
    p.add_argument("--resolution", type=float, default=0.125, help="--fit-budget: bisect until the bracket is this fraction of T")
    p.add_argument("--dry-run", action="store_true", help="--fit-budget on a tiny random model, tiny budget and lengths (seconds)")
    p.add_argument("--out", default="", help="--fit-budget: write fit.json here")
    p.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--_fsdp_child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--_model", default="smollm2-135m-instruct", help=argparse.SUPPRESS)
    p.add_argument("--_budget", type=float, default=0.0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.dry_run:  # seconds on any machine: one thread, however many cores other jobs leave
        a.threads = a.threads or 1
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    if a.objective == "dpo" and a.rows % 2:
        raise SystemExit(f"--objective dpo needs an even --rows (chosen / rejected pairs), got {a.rows}")
    if a._child:
        child(a._child[0], int(a._child[1]), a.rows, a.chunk, a.objective, a._model, a._budget)
        return
    if a._fsdp_child:
        fsdp_child(a._fsdp_child, a.rows)
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.ranks:
        fsdp_report([int(n) for n in a.ranks.split(",")], int(a.lengths.split(",")[0]), a.rows, a.threads)
        return
    if a.dry_run:  # the tiny model's RSS growth is mostly noise: this checks the code path, not the numbers
        a._model, a.chunk, a.start, a.max_len = "tiny", 16, 64, 256
        a.fit_budget = a.fit_budget or 64.0
    if a.fit_budget > 0:
        fit_report(a)
        return
    results = []
    for length in [int(x) for x in a.lengths.split(",")]:
        for mode in a.modes.split(","):
            r = _probe(mode, length, a.rows, a.objective, a)
            results.append(r)
            print(f"T={length:5d} {mode:10s} extra {r['extra_mib']:8.0f} MiB  peak {r['peak_mib']:8.0f} MiB  {r['seconds']:6.1f} s",
                  file=sys.stderr, flush=True)
    print(f"objective {a.objective}, {a.rows} rows, chunk {a.chunk}")
    print("| T | mode | learner extra MiB | peak RSS MiB | s | extra / logits |")
    print("|---|---|---|---|---|---|")
    base = {r["T"]: r["extra_mib"] for r in results if r["mode"] == "logits"}
    for r in results:
        ratio = r["extra_mib"] / base[r["T"]] if r["T"] in base else float("nan")
        print(f"| {r['T']} | {r['mode']} | {r['extra_mib']:.0f} | {r['peak_mib']:.0f} | {r['seconds']:.1f} | {ratio:.2f} |")
    t_max = max(r["T"] for r in results)
    at = {r["mode"]: r["extra_mib"] for r in results if r["T"] == t_max}
    if "logits" in at:
        print(" ".join(f"{m}_vs_logits_at_{t_max}={at[m] / at['logits']:.3f}" for m in ("streambp", "chunked") if m in at))


if __name__ == "__main__":
    main()
