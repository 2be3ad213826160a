"""posformer's own checkpoint files, below every loader: `posformer.loading` opens any checkpoint on top of them.

| module | what |
|---|---|
| native | load a model saved as `config.json` + `model.safetensors` (+ tokenizer); the writer is the model's |
| manifest | `manifest.json`: the SHA-256 and size of every other file, checked on load |
| model_dir | a model directory as a boundary: every file read through it stays inside it |
| generation_file | generation_config.json read into the `GenerationConfig` that gives `generate` its defaults |
| sizes | a config's sizes checked (bounds, weights header, memory) before any tensor is allocated |
"""
