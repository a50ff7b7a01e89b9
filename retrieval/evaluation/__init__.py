"""Evaluation of the shipped search on a team's own questions: formats, locating references, the strict
metric, paired comparison, and one run over one or two index generations (`unichunk eval`, the gated
rebuild). It sits in the retrieval layer, not the application layer, because the `rebuild` flow gates its
switch on it; `unichunk.Pipeline.eval` is the caller-facing operation."""
