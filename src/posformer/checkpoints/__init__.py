"""posformer's own checkpoint files, below every loader: `posformer.loading` opens any checkpoint on top of them.

| module | what |
|---|---|
| native | save and load a model as `config.json` + `model.safetensors` (+ tokenizer), written atomically |
| manifest | `manifest.json`: the SHA-256 and size of every other file, checked on load |
| model_dir | a model directory as a boundary: every file read through it stays inside it |
| atomic | writing a file so that a crash never leaves it half-written |
"""
