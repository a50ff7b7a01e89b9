"""Small texts several test modules share: two topics whose sentences are easy to tell apart by search."""

from __future__ import annotations

import csv
import json
import zlib
from pathlib import Path

TOPICS = [
    "The harbour crane lifts containers from the cargo ship onto waiting trucks.",
    "Tide tables tell the pilot when the channel is deep enough for the tanker.",
    "Fishermen mend their nets on the quay while gulls circle above the boats.",
    "The lighthouse keeper logs every passing vessel in a leather-bound book.",
    "Customs officers inspect the manifests of ships arriving from abroad.",
    "A dredger clears silt from the harbour mouth every spring.",
    "Ferries cross the bay twelve times a day in the summer season.",
    "The harbour master assigns each berth according to the vessel's draught.",
    "Ropes, fenders and bollards keep moored boats from scraping the wall.",
    "Storm warnings close the port and send the trawlers back to shelter.",
]
GARDEN = [
    "Tomatoes need full sun and regular watering to ripen in late summer.",
    "Compost made from kitchen scraps feeds the soil of the vegetable beds.",
    "Bees pollinate the apple blossom in the orchard each April.",
    "Mulch keeps weeds down and holds moisture around the roots of the roses.",
    "The gardener prunes the pear trees in winter while they are dormant.",
]


def repeated(sentences: list[str], repeat: int) -> str:
    return " ".join(f"{s} (note {i})" for i in range(repeat) for s in sentences)


def hashed_words(texts: list[str]) -> list[list[float]]:
    """A real, simple, deterministic embedding function for the `semantic` strategy's tests: a bag of
    words hashed into 64 dimensions (the same words, the same vector)."""
    out = []
    for text in texts:
        vector = [0.0] * 64
        for word in text.lower().split():
            vector[zlib.crc32(word.strip(".,;:()").encode()) % 64] += 1.0
        out.append(vector)
    return out


def small_eval_set(folder: Path) -> tuple[Path, Path]:
    """An evaluation set of its own in `folder`, in the shared set's layout: `corpora/` (the harbour and
    garden topics, as Markdown) and `questions.csv` (eight questions, each a sentence of one, referenced by
    its exact offsets). Returns (corpora, questions)."""
    corpora = folder / "corpora"
    corpora.mkdir()
    texts = {"harbour": repeated(TOPICS, 6), "garden": repeated(GARDEN, 10)}
    for name, text in texts.items():
        (corpora / f"{name}.md").write_text(text, encoding="utf-8")
    questions = folder / "questions.csv"
    with questions.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "references", "corpus_id"])
        for name, sentences in (("harbour", TOPICS[:4]), ("garden", GARDEN[:4])):
            for sentence in sentences:
                start = texts[name].index(sentence)
                ref = {"content": sentence, "start_index": start, "end_index": start + len(sentence)}
                writer.writerow([sentence.rstrip(".").lower(), json.dumps([ref]), name])
    return corpora, questions
