"""The image-token masked-diffusion family of Co-GRPO: 8x8 palette images, the schedule policy, their tasks and rewards."""
