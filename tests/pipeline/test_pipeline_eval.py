"""`unichunk eval` and the gated rebuild on a small corpus the tests write, through the real flows, stores
and models: every question format, references that cannot be located (reported, never dropped), two
generations side by side, a gate that refuses a worse chunking (the live generation keeps answering) and
one that lets a not-worse chunking go live."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from documents import write_files
from typer.testing import CliRunner

from unichunk import Pipeline
from unichunk.chunking.config import ChunkStrategy
from unichunk.chunking.ids import derive_document_id
from unichunk.chunking.sources import default_source_name
from unichunk.deployments.cli.exit_codes import ExitCode
from unichunk.deployments.cli.main import app

# Invented words, one per section, so each question has one right place; filler that every section shares,
# so a big chunk holds several sections and a small budget keeps only the head of it.
WORDS = ["zorbel", "quandix", "plimmet", "trosk", "vantile", "mirrow", "glendish", "sparrock", "humbert",
         "cravel", "dostrum", "fennick", "jaspel", "kodwin", "lurrow", "norvash"]  # fmt: skip
FILLER = (
    "The committee reviewed the schedule and the budget, noted the open questions, and agreed to meet "
    "again after the next release so that every team could report on its progress in the usual way."
)


def _topics() -> tuple[str, dict[str, tuple[int, int]]]:
    """A Markdown document of one section per word, and where each word's defining sentence lies."""
    text, spans = "# Topics\n\n", {}
    for n, word in enumerate(WORDS):
        sentence = f"The {word} is a device number {n} that measures {word} levels in the {word} chamber."
        section = f"## Section {n}\n\n{FILLER} {sentence} {FILLER}\n\n"
        start = len(text) + section.index(sentence)
        spans[word] = (start, start + len(sentence))
        text += section
    return text, spans


@pytest.fixture
def small_index(pipeline_env: Path, tmp_path: Path) -> tuple[Pipeline, Path, dict[str, tuple[int, int]], str]:
    text, spans = _topics()
    corpus = write_files(
        tmp_path / "corpus", {"topics.md": text, "notes/plain.txt": "The okapi lives in forests.\n"}
    )
    pipeline = Pipeline(data_dir=pipeline_env)
    assert pipeline.ingest(corpus).processed == 2
    return pipeline, corpus, spans, text


def _questions_csv(path: Path, spans: dict[str, tuple[int, int]], text: str) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "references", "corpus_id"])
        for word, (start, end) in spans.items():
            ref = {"content": text[start:end], "start_index": start, "end_index": end}
            writer.writerow([f"What does the {word} measure?", json.dumps([ref]), "topics"])
    return path


def test_eval_reads_every_format_and_reports_what_it_cannot_locate(small_index, tmp_path: Path) -> None:
    pipeline, corpus, spans, text = small_index
    source = default_source_name(corpus)
    topics_id = derive_document_id(source_system=source, source_id="topics.md")
    (s0, e0), (s1, e1), (s2, e2) = spans["zorbel"], spans["quandix"], spans["plimmet"]
    lines = [
        {"question": "What does the zorbel measure?",  # offsets and content, by source ID
         "references": [{"source_id": "topics.md", "start_char": s0, "end_char": e0, "content": text[s0:e0]}]},
        {"question": "What does the quandix measure?",  # content only: located in the text
         "references": [{"source_id": "topics.md", "content": text[s1:e1]}]},
        {"question": "What does the plimmet measure?",  # offsets only, by document ID
         "references": [{"document_id": topics_id, "start_char": s2, "end_char": e2}]},
        {"question": "What does the trosk measure?",  # offsets that disagree with the content
         "references": [{"source_id": "topics.md", "start_char": s0, "end_char": e0, "content": "not there"}]},
        {"question": "Where does the okapi live?",  # a document nobody ingested, and content nowhere
         "references": [{"source_id": "missing.md", "start_char": 0, "end_char": 5},
                        {"source_id": "notes/plain.txt", "content": "The okapi flies."}]},
    ]  # fmt: skip
    jsonl = tmp_path / "questions.jsonl"
    jsonl.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    report = pipeline.eval(jsonl)

    assert report["budgets"]["chars"] == [1000, 2000, 4000] and len(report["budgets"]["tokens"]) == 3
    assert [g["label"] for g in report["generations"]] == ["live"] and "differences" not in report
    overall = report["overall"]["live"]
    assert (
        overall["questions"] == 5 and overall["scored"] == 3
    )  # the trosk and okapi references are unlocated
    for q in report["questions"][:3]:  # each found, its whole sentence within 4,000 characters
        assert q["scores"]["live"]["chars"]["4000"]["recall"] == 1.0, q
        assert q["scores"]["live"]["rank"] == 1, q
    assert report["questions"][3]["scores"]["live"]["chars"] == {}
    reasons = sorted(u["reason"] for u in report["unlocated"])
    assert len(reasons) == 3, report["unlocated"]
    assert "not the reference's content" in reasons[2]
    assert any("no ingested document" in r and "missing.md" in r for r in reasons)
    assert any("content is not in the document" in r for r in reasons)

    saved = pipeline_env_files(pipeline)
    assert json.loads(saved["latest.json"]) == report and len(saved) == 2  # latest and one stamped copy

    relevant = tmp_path / "documents.jsonl"
    relevant.write_text(
        json.dumps({"question": "Where does the okapi live?", "relevant": ["notes/plain.txt"]}) + "\n"
        + json.dumps({"question": "What does the zorbel measure?", "relevant": ["topics", "gone.md"]}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    documents = pipeline.eval(relevant, k=1, retrievers=True)
    assert set(documents["overall"]) == {
        "live",
        "live:keywords",
        "live:vectors",
        "live:graph",
    }  # each alone too
    assert documents["overall"]["live"]["hit_at_k"] == 1.0 and documents["overall"]["live"]["mrr"] == 1.0
    assert documents["overall"]["live"]["scored"] == 0  # no spans: document-level figures only
    assert [u["reference"] for u in documents["unlocated"]] == ["gone.md[None:None]"]
    pipeline.close()


def pipeline_env_files(pipeline: Pipeline) -> dict[str, str]:
    folder = pipeline.settings.data_dir / "evaluations"
    return {path.name: path.read_text(encoding="utf-8") for path in folder.glob("*.json")}


def test_the_gate_refuses_a_worse_chunking_and_lets_a_not_worse_one_go_live(
    small_index, tmp_path: Path
) -> None:
    pipeline, corpus, spans, text = small_index
    questions = _questions_csv(tmp_path / "questions.csv", spans, text)
    live = pipeline.generations().live
    pipeline.close()

    refused = CliRunner().invoke(
        app,
        ["rebuild", str(corpus), "--strategy", "fixed_chars", "--chunk-size", "2000", "--chunk-overlap", "0",
         "--gate", str(questions)],
    )  # fmt: skip
    assert refused.exit_code == ExitCode.GATED, refused.output
    assert "gated" in refused.stdout and "recall at 1,000 characters" in refused.stdout, refused.stdout
    assert pipeline.generations().live == live  # kept, and still answering
    assert pipeline.search("zorbel", k=1).hits[0].source_id == "topics.md"
    candidate = next(g for g in pipeline.generations().generations if g.state == "ready")

    compared = CliRunner().invoke(
        app, ["eval", str(questions), "--against", candidate.generation_id, "--json"]
    )
    assert compared.exit_code == 0, compared.output
    report = json.loads(compared.stdout)
    assert [g["settings"] for g in report["generations"]] == ["auto", "fixed_chars 2000/0"]
    recall = report["differences"]["chars"]["1000"]["recall"]
    assert recall["high"] < 0 and recall["losses"] > recall["wins"], recall

    _, size, overlap = ChunkStrategy().effective()["markdown"]  # auto's own chunks for Markdown
    switched = pipeline.rebuild(
        corpus,
        strategy=ChunkStrategy(name="markdown", chunk_size=size, chunk_overlap=overlap),
        gate=questions,
    )
    assert switched.outcome == "switched", switched.line()
    assert switched.gate is not None and switched.gate["passed"] and switched.evaluation
    assert pipeline.generations().live == switched.generation != live
    pipeline.close()


def test_post_eval_scores_the_questions_sent_for_an_admin_and_refuses_a_reader(
    small_index, tmp_path: Path
) -> None:
    """`POST /eval` on a real listener: an admin token's CSV body gets the report `Pipeline.eval` makes of
    the same questions from a file; a reader's token is refused (403) and nothing is saved; a body of
    another type is a 415; the route is in the OpenAPI document with its two body types."""
    import httpx
    from servers import serving

    from unichunk.deployments.service.webhook import PrefectEventSink, create_app
    from unichunk.deployments.settings import ServiceSettings
    from unichunk.tokens import Tokens

    pipeline, _corpus, spans, text = small_index
    questions = _questions_csv(tmp_path / "questions.csv", spans, text)
    expected = pipeline.eval(questions, budgets=[1000, 2000])
    pipeline.close()
    reader, _ = Tokens(pipeline.settings).create(["eng"], name="reader")
    admin = "admin-token-for-eval"
    app = create_app(
        ServiceSettings(webhook_secret="w", api_token=admin),
        PrefectEventSink("http://127.0.0.1:9/api", timeout=2),
        search_sinks=dict,
        data_dir=pipeline.settings.data_dir,
    )
    body = questions.read_bytes()
    with serving(app) as port:
        url = f"http://127.0.0.1:{port}"

        def post(token: str, content_type: str = "text/csv") -> httpx.Response:
            return httpx.post(
                f"{url}/eval?budgets=1000&budgets=2000",
                content=body,
                headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
                timeout=600,
            )

        before = pipeline_env_files(pipeline)
        refused = post(reader)
        assert refused.status_code == 403 and "for admins only" in refused.text, refused.text
        assert pipeline_env_files(pipeline) == before  # nothing evaluated, nothing saved
        assert post(admin, "application/json").status_code == 415

        answered = post(admin)
        assert answered.status_code == 200, answered.text
        report = answered.json()
        assert report["questions_file"] == "(sent as csv)"
        assert report["overall"] == expected["overall"] and report["questions"] == expected["questions"]
        assert json.loads(pipeline_env_files(pipeline)["latest.json"]) == report

        schema = httpx.get(f"{url}/openapi.json", headers={"Authorization": f"Bearer {admin}"}).json()
        content = schema["paths"]["/eval"]["post"]["requestBody"]["content"]
        assert {"text/csv", "application/jsonl"} <= set(content)
