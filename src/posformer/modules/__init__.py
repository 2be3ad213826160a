"""The parts a model is built from; `posformer.model.Transformer` puts them together.

Read in this order: stack (an encoder or decoder: encodings, blocks, final norm), blocks (attention, optional
cross-attention and feed-forward, each a residual), attention (SelfAttention, CrossAttention and the one
kernel `attend`), then the smaller parts:

| module | what |
|---|---|
| stack | `Stack`: the position encodings, the blocks and the final norm of an encoder or a decoder |
| blocks | `Block`: self-attention, optional cross-attention and a feed-forward network |
| attention | `SelfAttention`, `CrossAttention` (MHA, GQA, MQA) over one kernel, `attend` |
| latent_attention | `LatentAttention`: multi-head latent attention (MLA) and its compressed KV cache |
| gated_deltanet | `GatedDeltaNet`: a layer that mixes tokens by the gated delta rule instead of attention |
| bias_blocks | attention with a position bias in blocks of queries, each asking for its own rows of the bias |
| cache | the KV cache: keys, values and key positions per layer, allocated once |
| feedforward | the position-wise feed-forward network and its activations |
| moe | the mixture-of-experts feed-forward: a top-k router, batched experts, the load-balancing loss |
| norms | LayerNorm, RMSNorm and DeepNorm's constants |
| heads | the output heads (LM, MLM, span QA, classification) and their losses |
| head_outputs | the head's side of the forward: inputs a model can use, logits and losses, the experts' aux loss |
| outputs | `ModelOutput`, the record `Transformer.forward` returns |
| init | the weight initialisation schemes of `Config.init` |
| random_positions | randomized positions for training (Ruoss et al. 2023) |
| sink_tokens | learned sink tokens leading every decoder sequence (`Config.sink_tokens`) |
"""
