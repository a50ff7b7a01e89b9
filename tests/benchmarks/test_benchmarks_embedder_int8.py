"""The int8 benchmark's transforms on the real MiniLM: SmoothQuant's scaling changes nothing in float (only
where the quantiser's scale falls), Q, K and V share one input scale, and the simulated int8 is what it says."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from transformers import AutoModel

from benchmarks.embedder_bf16 import batches
from benchmarks.embedder_int8 import calibration_texts, fake_int8, input_maxima, sharing_groups, smooth
from unichunk.sinks.vectors.minilm import load_minilm
from unichunk.sinks.vectors.onnx_export import weights_path


@pytest.fixture(scope="module")
def bert() -> torch.nn.Module:
    return AutoModel.from_pretrained(str(weights_path().parent), local_files_only=True).eval()


@pytest.fixture(scope="module")
def prepared() -> list[dict[str, torch.Tensor]]:
    texts = [
        "Chunks keep exact offsets.",
        "The graph links entities to chunk IDs in Neo4j and FalkorDB alike.",
    ]
    return batches(load_minilm("cpu").tokenizer, texts, 8)


def test_query_key_and_value_read_one_input_and_every_other_layer_its_own(bert: torch.nn.Module) -> None:
    groups = sharing_groups(bert)
    assert sum(len(g) for g in groups) == sum(isinstance(m, torch.nn.Linear) for m in bert.modules())
    shared = [g for g in groups if len(g) > 1]
    assert len(shared) == 6  # one per encoder layer
    assert all(sorted(n.rsplit(".", 1)[1] for n in g) == ["key", "query", "value"] for g in shared)


@pytest.mark.parametrize("alpha", [0.5, 0.8])
def test_smoothing_leaves_the_float_model_s_output_as_it_was(
    bert: torch.nn.Module, prepared: list[dict[str, torch.Tensor]], alpha: float
) -> None:
    maxima = input_maxima(bert, batches(load_minilm("cpu").tokenizer, calibration_texts()[:4], 8))
    smoothed = smooth(copy.deepcopy(bert), maxima, alpha)
    with torch.inference_mode():
        for features in prepared:
            before = bert(**features).last_hidden_state
            after = smoothed(**features).last_hidden_state
            assert torch.allclose(before, after, atol=1e-3, rtol=1e-3)
    # and the scales moved something: the weights are not the original ones
    layer = smoothed.encoder.layer[0].attention.self.query
    assert not torch.equal(layer.linear.weight, bert.encoder.layer[0].attention.self.query.weight)


def test_simulated_int8_keeps_256_levels_and_zero_exact() -> None:
    x = torch.tensor([[-3.0, 0.0, 1.0, 5.0], [0.1, 0.2, 0.0, -0.1]])
    per_tensor, per_token = fake_int8(x, per_token=False), fake_int8(x, per_token=True)
    assert per_tensor[0, 1] == 0 and per_token[1, 2] == 0
    assert (per_tensor - x).abs().max() <= 4.0 / 255 + 1e-6  # half a step of 8/255: one range for the tensor
    assert (per_token[1] - x[1]).abs().max() <= 0.15 / 255 + 1e-7  # the small row's own, finer step
    assert (per_tensor[1] - x[1]).abs().max() > (per_token[1] - x[1]).abs().max()


def test_block_int8_file_multiplies_every_weight_in_int8_blocks(tmp_path: Path) -> None:
    """The `--blocks` variant is what its row says: every weight MatMul of the fused file is `MatMulNBits`
    with 8-bit weights in blocks of the size asked and int8 compute (`accuracy_level` 4), and it runs."""
    pytest.importorskip("onnx_ir", reason="the bench extra's MatMulNBits quantiser needs onnx-ir")
    import onnx
    import onnxruntime

    from benchmarks.embedder_int8 import block_int8_file
    from unichunk.sinks.vectors.minilm_onnx import OnnxRunner

    model = onnx.load(str(block_int8_file(32, tmp_path)))
    blocks = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    assert len(blocks) == 6 * 6  # per layer: query, key, value, attention output, intermediate, output
    weights = {t.name for t in model.graph.initializer}
    assert not [n for n in model.graph.node if n.op_type == "MatMul" and set(n.input) & weights]
    for node in blocks:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert (attributes["bits"], attributes["block_size"], attributes["accuracy_level"]) == (8, 32, 4)
    vectors = OnnxRunner(onnxruntime, tmp_path / "block-int8-32.onnx").encode(
        ["Chunks keep exact offsets."], 8
    )
    assert vectors.shape == (1, 384) and abs(float((vectors**2).sum()) - 1) < 1e-4
