"""Compute kernels with their own autograd or device paths, and the masks they take; they know nothing of a model.

| module | what |
|---|---|
| linear | the linear layer of every model: `F.linear`, few rows spread over the CPU's threads |
| causal_blocks | causal attention on the CPU, one block of queries at a time |
| softmax_attention | attention written out, with the probabilities at hand (the eager kernel) |
| flex | FlexAttention glue: a position bias as a `score_mod`, the mask as a block mask |
| flex_blocks | a mask's rule as FlexAttention's block mask and mask_mod, without a (T, S) tensor |
| cross_entropy | summed token cross-entropy as one autograd node, in float32 or wider |
| linear_cross_entropy | the LM head and its loss over row chunks, without the (N, V) logits |
| masks | attention masks: key padding, causal order, sliding windows, padded queries, held as a rule |
| packing | `TokenPacking`: per-token layers on the real tokens of a padded batch only |
| gated_delta_rule | the gated delta rule of Gated DeltaNet layers, chunked (linear in length) and recurrent |
"""
