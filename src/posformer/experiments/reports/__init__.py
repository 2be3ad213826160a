"""Above every experiment: the markdown of recorded runs, whatever benchmark made them (`runs`), for `posformer
report` and the figures of `posformer plot`."""
