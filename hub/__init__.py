"""The Hugging Face Hub client: a model repo's config.json and safetensors counts, cached."""
