"""The roofline benchmark counts MiniLM's work exactly (torch's own FLOP counter on the real model agrees) and
its bound is that work at the kernels' rates."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModel

from benchmarks.embedder_roofline import Shape, bound, useful_flops
from unichunk.sinks.vectors.onnx_export import weights_path


@pytest.fixture(scope="module")
def bert() -> torch.nn.Module:
    model = AutoModel.from_pretrained(str(weights_path().parent), local_files_only=True).eval()
    model.set_attn_implementation("eager")  # attention as matrix products, which the counter sees
    return model


@pytest.mark.parametrize("lengths", [[7], [58], [256], [12, 12, 12]])
def test_the_counted_work_is_what_torch_counts_on_the_real_model(
    bert: torch.nn.Module, lengths: list[int]
) -> None:
    shape = Shape.bundled()
    counted = 0
    for n in lengths:
        ids = torch.randint(1000, 2000, (1, n))
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            bert(input_ids=ids, attention_mask=torch.ones_like(ids))
        counted += counter.get_total_flops()
    weights, attention = useful_flops(shape, lengths)
    pooler = 2 * shape.hidden * shape.hidden * len(lengths)  # BERT's pooler: not read by the embedder
    assert counted == weights + attention + pooler
    assert attention > 0  # the attention products are counted, not left out


def test_at_one_rate_everywhere_the_bound_is_the_work_over_that_rate() -> None:
    shape = Shape(hidden=384, intermediate=1536, layers=6)
    lengths = [40, 58, 200]
    weights, attention = useful_flops(shape, lengths)
    rates = dict.fromkeys(shape.products(8), 100.0)  # GFLOP/s
    assert bound(shape, lengths, rates, 100.0) == pytest.approx((weights + attention) / 100e9)
    faster = {**rates, "up": 200.0, "down": 200.0}
    assert bound(shape, lengths, faster, 100.0) < bound(shape, lengths, rates, 100.0)
