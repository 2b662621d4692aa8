"""The models lyre serves and the layers that change them: the Llama and its configuration, loading from
Hugging Face folders, GGUF files and hub ids, PEFT LoRA folders and the LoRA and FP8 layers, the demo model,
and which model and codec to load. The engine's runtime builds on these; nothing here knows the engine.

Nothing is imported here, so a module that needs only a folder's files (`folder`) loads no torch.
"""
