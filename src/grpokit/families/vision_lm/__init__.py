"""The vision-language family: Qwen2-VL-style policies over images and video (PAPO, DeepVideo-R1), and the tiny embedded VLM."""
