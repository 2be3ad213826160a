"""Speed and memory benchmarks: each measures posformer against a peer measured in the same run (`posformer bench`)."""
