"""Speed benchmarks: each times posformer against a peer measured in the same run (`posformer bench`)."""
