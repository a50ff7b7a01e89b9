"""The stores (vectors, keywords, graph) and the models that prepare their input.

Importing the package sets OMP_WAIT_POLICY=PASSIVE unless the environment already sets it: the GNU
OpenMP runtime that torch (MiniLM) uses reads it once, when loaded. By default its worker threads spin
while they wait for work; in the pipeline they share the cores with spaCy, the stores and Prefect, and
the spinning took CPU from all of them (`python -m flows.bench_pipeline` measured a cold run's CPU time
going from ~78 s to ~71 s). The embedder alone runs as fast either way.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
