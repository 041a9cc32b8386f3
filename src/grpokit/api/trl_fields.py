"""The TRL 1.16 ``GRPOConfig`` arguments that :class:`grpokit.GRPOConfig` does not map one by one.

TRL's ``GRPOConfig`` (``trl/trainer/grpo_config.py``, https://huggingface.co/docs/trl/grpo_trainer)
extends ``transformers.TrainingArguments``: 191 fields. The 53 that change a GRPO run and that
grpokit honours are fields of :class:`grpokit.api.trl_args.GRPOConfig`, with their mapping. The
others fall in two tables, each name with TRL 1.16's default:

- ``PLUMBING``: accepted with any value, because in a single-process grpokit run they change
  nothing in the result (logging verbosity, data-loader workers, DDP / DeepSpeed / Hub settings
  that only act with ``push_to_hub`` or several processes, vLLM settings that only act with
  ``use_vllm``, the SAPO / VESPO temperatures read only by loss types refused here, the adaptive
  entropy bounds read only with ``use_adaptive_entropy``, TR-DPO's mixup read only with
  ``sync_ref_model``);
- ``REFUSED_UNLESS_DEFAULT``: accepted at TRL's default (what grpokit does then is what TRL
  does), refused in one line at any other value, because grpokit cannot honour it (another
  optimizer, torch.compile, Liger, NEFTune, min-p / repetition penalty, vLLM generation, two-sided
  clipping, TR-DPO reference sync, entropy-based token selection, GDPO's reward aggregation, ...).
  ``ALSO_ACCEPTED`` lists the non-default values of those that mean the same run.

``tests/api/test_trl_fields.py`` checks the three tables against the installed TRL's field list.
"""

from __future__ import annotations

PLUMBING = {
    'average_tokens_across_devices': True, 'activation_checkpointing_kwargs': None, 'gradient_checkpointing_kwargs': None,
    'use_cache': False, 'torch_empty_cache_steps': None, 'log_on_each_node': True, 'logging_nan_inf_filter': True,
    'include_num_input_tokens_seen': 'no', 'log_level': 'passive', 'log_level_replica': 'warning', 'run_name': None,
    'project': 'huggingface', 'trackio_space_id': None, 'trackio_bucket_id': None, 'trackio_static_space_id': None,
    'eval_delay': 0, 'prediction_loss_only': False, 'eval_do_concat_batches': True, 'eval_use_gather_object': False,
    'eval_accumulation_steps': None, 'include_for_metrics': [], 'batch_eval_metrics': False, 'save_only_model': False,
    'save_on_each_node': False, 'enable_jit_checkpoint': False, 'hub_token': None, 'hub_private_repo': None, 'hub_model_id':
    None, 'hub_strategy': 'every_save', 'hub_always_push': False, 'hub_revision': None, 'ignore_data_skip': False,
    'restore_callback_states_from_checkpoint': False, 'dataloader_num_workers': 0, 'dataloader_pin_memory': True,
    'dataloader_persistent_workers': False, 'dataloader_prefetch_factor': None, 'dataloader_multiprocessing_context': None,
    'dataloader_in_order': True, 'label_names': None, 'length_column_name': 'length', 'ddp_find_unused_parameters': None,
    'ddp_bucket_cap_mb': None, 'ddp_broadcast_buffers': None, 'ddp_static_graph': None, 'ddp_backend': None, 'ddp_timeout':
    1800, 'debug': '', 'skip_memory_metrics': True, 'do_train': False, 'do_eval': False, 'do_predict': False, 'local_rank':
    -1, 'ds3_gather_for_generation': True, 'pad_to_multiple_of': 'auto', 'cache_implementation': None, 'vllm_mode':
    'colocate', 'vllm_model_impl': 'vllm', 'vllm_enable_sleep_mode': False, 'vllm_structured_outputs_regex': None,
    'vllm_server_base_url': None, 'vllm_server_host': '0.0.0.0', 'vllm_server_port': 8000, 'vllm_server_timeout': 240.0,
    'vllm_group_port': 51216, 'vllm_gpu_memory_utilization': 0.3, 'vllm_max_model_length': None,
    'vllm_tensor_parallel_size': 1, 'sapo_temperature_neg': 1.05, 'sapo_temperature_pos': 1.0, 'vespo_k_pos': 2.0,
    'vespo_lambda_pos': 3.0, 'vespo_k_neg': 3.0, 'vespo_lambda_neg': 2.0, 'ref_model_mixup_alpha': 0.6,
    'ref_model_sync_steps': 512, 'entropy_coef_min': 0.0, 'entropy_coef_max': 1.0, 'entropy_coef_delta': 0.005,
    'entropy_target': 0.2, 'vllm_importance_sampling_correction': True, 'vllm_importance_sampling_mode': 'sequence_mask',
    'vllm_importance_sampling_clip_max': 3.0, 'vllm_importance_sampling_clip_min': None, 'log_multimodal': True,
    'log_unique_prompts': False, 'transformers_continuous_batching_config': None, 'vllm_importance_sampling_cap': None,
}
REFUSED_UNLESS_DEFAULT = {
    'lr_scheduler_kwargs': None, 'optim': 'adamw_torch_fused', 'optim_args': None, 'adam_epsilon': 1e-08,
    'optim_target_modules': None, 'label_smoothing_factor': 0.0, 'bf16_full_eval': False, 'fp16_full_eval': False, 'tf32':
    None, 'activation_checkpointing': None, 'torch_compile': False, 'torch_compile_backend': None, 'torch_compile_mode':
    None, 'use_liger_kernel': False, 'liger_kernel_config': None, 'neftune_noise_alpha': None, 'auto_find_batch_size':
    False, 'eval_on_start': False, 'push_to_hub': False, 'load_best_model_at_end': False, 'metric_for_best_model': None,
    'greater_is_better': None, 'full_determinism': False, 'data_seed': None, 'accelerator_config': None,
    'parallelism_config': None, 'dataloader_drop_last': False, 'train_sampling_strategy': 'random', 'fsdp': None,
    'fsdp_config': None, 'deepspeed': None, 'trust_remote_code': False, 'router_aux_loss_coef': None,
    'cast_lm_head_to_fp32': False, 'num_generations_eval': None, 'min_p': None, 'generation_kwargs': None,
    'chat_template_kwargs': None, 'repetition_penalty': 1.0, 'use_vllm': False, 'delta': None,
    'multi_objective_aggregation': 'sum_then_normalize', 'sync_ref_model': False, 'top_entropy_quantile': 1.0,
    'entropy_coef': 0.0, 'use_adaptive_entropy': False, 'off_policy_mask_threshold':
    None, 'log_completions_hub_repo': None, 'use_transformers_continuous_batching': False, 'use_transformers_paged': False,
}

# Values other than TRL's default that mean the same run here.
ALSO_ACCEPTED = {
    "optim": ("adamw_torch",),  # the same AdamW update as the fused kernel grpokit uses
}
