"""Fusion chosen by measurement (issue 27): tuned on one half of the evaluation questions, reported on the other.

    python -m benchmarks.fusion_tuning [--corpora DIR] [--questions FILE] [--retrievers keywords,vectors]
        [--lists FILE] [--refresh] [--no-baselines] [--plots-dir DIR] [--cache-dir DIR]
        [--model-input segments|chunks]

1. The corpora are chunked as shipped (`auto`) and ingested through the real BM25 sink and Qdrant with
   MiniLM (as `benchmarks.retrieval_quality` does), the models reading them as shipped (`model_input=
   segments`: each piece between chunk boundaries once, a chunk's vector composed from its pieces'; the
   baselines of step 4 embedded whole, as their frameworks would); every question is ranked once per retriever
   (`unichunk.retrieval.ranking.retrieve` in that retriever's mode) `LIST_DEPTH` deep, and the lists, with
   each hit's own score, are cached (`--lists`): fusing them again costs no store and no model.
2. Every candidate of the grid (`candidates()`: reciprocal-rank fusion over rrf_k, the vectors' weight and
   the candidate depth per retriever; normalised-score fusion, min-max or z-score, over convex weights and
   depth) fuses each question's lists (the shipped `rrf_fuse` or `score_fuse`), keeps the
   first `HITS` (as `unichunk eval` does) and is scored with the strict metric at 1,000 / 2,000 / 4,000
   characters on the **tune** half of `split_halves` only.
3. The choice: the highest mean recall over the three budgets; among candidates within `TIE` of it, the one
   that changes the fewest constants of the old default (RRF 60, equal weights, 40 candidates), then the
   higher mean. A choice that fuses a third list (the graph's) must pass issue 27's test of that list, on
   the tune half and on the reported one: against the same fusion without it, it adds recall at one budget
   at least and costs none at any. Otherwise the list stays an option and the default is chosen again, on
   the tune half, among the fusions without it (this yes/no is the only thing the report half decides).
4. On the **report** half, never seen by step 3: each retriever alone, the old default and the chosen fusion
   beside every baseline chunking with every retriever (`retrieval_quality.run(half="report")`), the issue's
   targets, and the chosen fusion paired question by question against the old default and the best
   baseline at each budget (bootstrap CI, sign test). A plot of recall against budget is written.

`--retrievers` names the ranked lists fused, by `retrieve`'s mode names: `keywords,vectors` by default,
`keywords,vectors,graph` adds the knowledge graph's list (spaCy extraction into an embedded FalkorDB,
a few minutes more), with its own weight, 0 included, in the grid.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import product
from pathlib import Path

import numpy as np
from qdrant_client import QdrantClient

from benchmarks import evaldata, retrieval_quality
from benchmarks.budget_metric import BUDGETS, GRID, paired_bootstrap, strict_grid
from benchmarks.retrieval_quality import (
    CachedEmbedder,
    Question,
    load_corpora,
    load_questions,
    model_input,
    ours,
)
from benchmarks.strict_report import Results
from unichunk.chunking.config import ChunkStrategy
from unichunk.retrieval import Readers
from unichunk.retrieval.evaluation.questions import load_questions as read_questions
from unichunk.retrieval.evaluation.questions import split_halves
from unichunk.retrieval.fusion import Hit, rrf_fuse, score_fuse
from unichunk.retrieval.graph_search import GRAPH_SCORING
from unichunk.retrieval.ranking import RetrievalSettings, retrieve
from unichunk.sinks.base import ScoredChunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.keywords.bm25 import K1, B, BM25Sink
from unichunk.sinks.vectors.minilm import MiniLMEmbedder
from unichunk.sinks.vectors.qdrant import QdrantSink

LIST_DEPTH = 100  # hits cached per retriever and question: the deepest candidate depth of the grid
HITS = 40  # fused hits scored per question: `unichunk eval`'s DEPTH
DEPTHS = (20, 40, 100)  # candidates per retriever before fusion
RRF_KS = (0, 1, 2, 5, 10, 20, 40, 60, 100)
WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)  # of every retriever after the first, the first's being 1
TIE = 0.0025  # recall: candidates within a quarter of a point of the best count as tied
TARGETS = {1000: 0.70, 2000: 0.87, 4000: 0.95}  # issue 27: the shipped search on the report half
LEAD = 0.02  # issue 27: ahead of every baseline at every budget by at least 2 points
IDX = [GRID.index(b) for b in BUDGETS]


@dataclass(frozen=True)
class Candidate:
    """One way to fuse: `method` "rrf" (with `rrf_k`) or a normaliser of `score_fuse`, the retrievers'
    weights, and how many candidates each retriever gives before fusion."""

    method: str
    weights: tuple[tuple[str, float], ...]
    depth: int
    rrf_k: int | None = None

    def label(self) -> str:
        weights = ", ".join(f"{name} {w:g}" for name, w in self.weights)
        head = f"RRF k={self.rrf_k}" if self.method == "rrf" else f"{self.method} scores"
        return f"{head}; {weights}; {self.depth} candidates"

    def changes(self, old: Candidate) -> int:
        """How many of `old`'s constants this changes: the method or its rrf_k, the weights, the depth."""
        return (
            int((self.method, self.rrf_k) != (old.method, old.rrf_k))
            + int(self.weights != old.weights)
            + int(self.depth != old.depth)
        )

    def fuse(self, lists: Mapping[str, Sequence[ScoredChunk]]) -> list[Hit]:
        cut = {name: found[: self.depth] for name, found in lists.items()}
        weights = dict(self.weights)
        if self.method == "rrf":
            assert self.rrf_k is not None
            return rrf_fuse(cut, k=HITS, weights=weights, rrf_k=self.rrf_k)
        return score_fuse(cut, k=HITS, weights=weights, normalise=self.method)


def old_default(retrievers: Sequence[str]) -> Candidate:
    """What hybrid search did before issue 27: RRF 60, keywords and vectors weighing 1 (a third list, the
    graph's, not fused: 0), `unichunk eval`'s 40 candidates."""
    return Candidate("rrf", tuple((r, 1.0 if i < 2 else 0.0) for i, r in enumerate(retrievers)), HITS, 60)


def shipped(retrievers: Sequence[str]) -> Candidate:
    """The fusion `RetrievalSettings` ships now, read from its defaults (the one place they are written)."""
    settings = RetrievalSettings()
    weights = tuple((r, float(settings.weights.get(r, 0.0 if r == "graph" else 1.0))) for r in retrievers)
    method = settings.fusion
    return Candidate(method, weights, HITS, settings.rrf_k if method == "rrf" else None)


def candidates(retrievers: Sequence[str]) -> list[Candidate]:
    """The grid: RRF over rrf_k x the other retrievers' weights (the first's fixed at 1; a third list's
    may be 0, leaving it out) x depth; min-max and z-score fusion over convex weights in steps of 0.1 (the
    first two lists above 0) x depth."""
    first, rest = retrievers[0], list(retrievers[1:])
    choices = [WEIGHTS if i == 0 else (0.0, *WEIGHTS) for i in range(len(rest))]
    out = []
    for depth, rrf_k in product(DEPTHS, RRF_KS):
        for ws in product(*choices):
            out.append(Candidate("rrf", ((first, 1.0), *zip(rest, ws, strict=True)), depth, rrf_k))
    tenths = [t for t in product(range(11), repeat=len(retrievers)) if sum(t) == 10 and min(t[:2]) > 0]
    for depth, method, shares in product(DEPTHS, ("minmax", "zscore"), tenths):
        weights = tuple((r, round(0.1 * t, 1)) for r, t in zip(retrievers, shares, strict=True))
        out.append(Candidate(method, weights, depth))
    return out


# -- the ranked lists -----------------------------------------------------------------------------------------


@dataclass
class Lists:
    """Per question (in file order), per retriever, the ranked hits `LIST_DEPTH` deep."""

    questions: list[Question]
    doc_ids: dict[str, str]  # corpus -> document ID
    ranked: list[dict[str, list[ScoredChunk]]]

    def save(self, path: Path, key: str) -> None:
        rows = [
            {name: [[h.chunk_id, h.document_id, h.chunk_index, h.start_char, h.end_char, h.score] for h in hits]
             for name, hits in per.items()}
            for per in self.ranked
        ]  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": key, "doc_ids": self.doc_ids, "ranked": rows}))

    @classmethod
    def load(cls, path: Path, key: str, questions: list[Question]) -> Lists | None:
        if not path.is_file():
            return None
        saved = json.loads(path.read_text())
        if saved.get("key") != key:
            return None
        ranked = [
            {name: [ScoredChunk(c, d, i, s, e, "", score=sc) for c, d, i, s, e, sc in hits]
             for name, hits in per.items()}
            for per in saved["ranked"]
        ]  # fmt: skip
        return cls(questions, saved["doc_ids"], ranked)


def lists_key(
    corpora_dir: Path, questions_file: Path, retrievers: Sequence[str], ours_input: str | None = None
) -> str:
    """What the cached lists depend on: the data, the retrievers, the depth, the chunking, what the models
    read of it (`model_input`, `ours_input` or as shipped) and the rankers' constants as shipped."""
    digest = hashlib.sha256()
    for path in [*sorted(p for p in corpora_dir.iterdir() if p.is_file()), questions_file]:
        digest.update(path.name.encode() + path.read_bytes())
    rankers = [K1, B, asdict(GRAPH_SCORING)]  # BM25's constants and the graph list's rules, as shipped
    digest.update(
        json.dumps(
            [
                list(retrievers),
                LIST_DEPTH,
                ChunkStrategy().effective(),
                model_input(False, ours_input),
                rankers,
            ],
            default=str,
        ).encode()
    )
    return digest.hexdigest()


def build_lists(
    corpora_dir: Path,
    questions: list[Question],
    retrievers: Sequence[str],
    cache_dir: Path | None,
    ours_input: str | None = None,
) -> Lists:
    """Every question ranked by each retriever alone over `auto`'s chunks in the real stores: BM25 and
    Qdrant always; with `graph` among `retrievers`, the knowledge graph too (spaCy extraction into an
    embedded FalkorDB under a temporary data dir, stopped after), ranked by the read path's `rankers`.
    MiniLM and spaCy read the chunks as `ours_input` says (`model_input`; None: as shipped, segments)."""
    unknown = set(retrievers) - {"keywords", "vectors", "graph"}
    if unknown:
        raise SystemExit(f"this build has no retriever {sorted(unknown)} to rank with")
    corpora = load_corpora(corpora_dir)
    embedder = CachedEmbedder(MiniLMEmbedder(), cache_dir)
    chunker = ours(ChunkStrategy(), embedder.embed)
    ranked: list[dict[str, list[ScoredChunk]]] = []
    with tempfile.TemporaryDirectory(prefix="bench_fusion_") as tmp:
        settings = SinkSettings(
            data_dir=Path(tmp),
            qdrant_collection="fusion",
            graph_name="fusion",
            model_input=model_input(False, ours_input),
        )
        stores = {
            "keywords": BM25Sink(settings, path=Path(tmp) / "bm25.sqlite"),
            "vectors": QdrantSink(settings, embedder=embedder, client=QdrantClient(":memory:")),
        }
        if "graph" in retrievers:
            from unichunk.sinks.factory import open_sink

            stores["graph"] = open_sink("graph", settings)
        try:
            for doc in corpora.values():
                chunks = chunker(doc)
                for store in stores.values():
                    store.upsert(doc, chunks)
            sinks = Readers.of(stores).rankers()
            missing = set(retrievers) - set(sinks)
            if missing:
                raise SystemExit(
                    f"no retriever {sorted(missing)} in this build: ranking offers {sorted(sinks)}"
                )
            for number, q in enumerate(questions):
                per = {}
                for name in retrievers:
                    setting = RetrievalSettings(mode=name, candidates=LIST_DEPTH)  # type: ignore[arg-type]
                    per[name] = [h.chunk for h in retrieve(sinks, q.text, LIST_DEPTH, setting).hits]
                ranked.append(per)
                if number % 50 == 0:
                    print(f"ranked {number + 1}/{len(questions)} questions", flush=True)
        finally:
            for store in stores.values():
                store.close()
            if "graph" in stores:
                from unichunk.sinks.graph.falkordb_server import stop_server

                stop_server(Path(tmp))
    return Lists(questions, {name: d.document_id for name, d in corpora.items()}, ranked)


# -- scoring -------------------------------------------------------------------------------------------------


def recall_grid(
    lists: Lists, rows: Sequence[int], rank: Candidate | str, budgets: Sequence[int]
) -> np.ndarray:
    """(len(rows), len(budgets)): strict recall of each question in `rows` ranked by `rank` (a candidate
    fusion, or one retriever's list alone, its first `HITS`)."""
    out = np.zeros((len(rows), len(budgets)))
    for n, i in enumerate(rows):
        q = lists.questions[i]
        hits = lists.ranked[i][rank][:HITS] if isinstance(rank, str) else rank.fuse(lists.ranked[i])
        spans = [(h.document_id, h.start_char, h.end_char) for h in hits]
        out[n] = strict_grid(q.references, lists.doc_ids[q.corpus], spans, budgets)[:, 0]
    return out


def choose(scored: Mapping[Candidate, np.ndarray], old: Candidate) -> Candidate:
    """The best mean recall over the budgets; within `TIE` of it, the fewest changes from `old`."""
    mean = {c: float(v.mean()) for c, v in scored.items()}
    best = max(mean.values())
    tied = [c for c in scored if mean[c] >= best - TIE]
    return min(tied, key=lambda c: (c.changes(old), -mean[c], c.label()))


def without_extra(candidate: Candidate) -> Candidate:
    """The same fusion with every list after the first two weighing 0 (the graph's left out)."""
    weights = tuple((r, w if i < 2 else 0.0) for i, (r, w) in enumerate(candidate.weights))
    return Candidate(candidate.method, weights, candidate.depth, candidate.rrf_k)


def uses_extra(candidate: Candidate) -> bool:
    return any(w > 0 for _, w in candidate.weights[2:])


def adds_and_costs_none(gain: np.ndarray) -> bool:
    """Issue 27's test of the graph list: per-budget mean gain over the same fusion without it adds
    recall at one budget at least and costs none at any."""
    return bool(gain.max() > 1e-9 and gain.min() >= -1e-9)


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def _row(label: str, recalls: np.ndarray) -> str:
    """recalls: (questions, len(BUDGETS))."""
    means = recalls.mean(axis=0)
    return f"| {label} | " + " | ".join(_pct(v) for v in means) + f" | {_pct(means.mean())} |"


def _paired(label: str, ours_: np.ndarray, theirs: np.ndarray) -> str:
    cells = []
    for j in range(len(BUDGETS)):
        p = paired_bootstrap(ours_[:, j], theirs[:, j])
        cells.append(f"{100 * p.mean:+.1f} [{100 * p.low:+.1f}, {100 * p.high:+.1f}] "
                     f"{p.wins}/{p.losses}/{p.ties} p={p.p:.2g}{'*' if p.significant else ''}")  # fmt: skip
    return f"| {label} | " + " | ".join(cells) + " |"


def baseline_rows(results: Results) -> Iterator[tuple[str, np.ndarray]]:
    """(label, per-question character recall on GRID) of every baseline chunking with every ranker."""
    for (config, retriever, unit), arr in results.strict.items():
        if results.baseline[config] and unit == "chars":
            yield f"{config} / {retriever}", arr[:, :, 0]


def write_plot(rows: Mapping[str, np.ndarray], baselines: Mapping[str, np.ndarray], chosen: str,
               path: Path) -> Path:  # fmt: skip
    """Recall against budget on the report half: ours solid (the chosen fusion thick, black), each baseline
    chunking under its best ranker dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=100)
    ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)  # a dozen lines, no colour twice
    for label, arr in rows.items():
        ax.plot(GRID, 100 * arr.mean(axis=0), "-", marker=".", label=label,
                **({"color": "black", "linewidth": 2.4} if label == chosen else {"linewidth": 1.2}))  # fmt: skip
    best: dict[str, tuple[str, np.ndarray]] = {}
    for label, arr in baselines.items():
        config = label.split(" / ")[0]
        if config not in best or arr[:, IDX].mean() > best[config][1][:, IDX].mean():
            best[config] = (label, arr)
    for label, arr in best.values():
        ax.plot(GRID, 100 * arr.mean(axis=0), "--", marker=".", label=label, linewidth=1.0)
    ax.set(xscale="log", xlabel="budget (characters of retrieved text)", ylabel="recall (%)", ylim=(0, 100),
           title="strict recall vs budget, report half: fusion vs baselines")  # fmt: skip
    ax.set_xticks(list(GRID), [f"{b:,}" for b in GRID])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class Choice:
    """What the tune half decided: the old default, the fusion to ship, and the fusion with a third list
    when the issue's test kept that list an option."""

    old: Candidate
    chosen: Candidate
    option: Candidate | None = None

    def labelled(self) -> list[tuple[str, Candidate]]:
        rows = [(f"old default ({self.old.label()})", self.old)]
        if self.option is not None:
            rows.append((f"option ({self.option.label()})", self.option))
        return [*rows, (f"chosen ({self.chosen.label()})", self.chosen)]


def _table_head(first: str, mean: bool = True) -> None:
    print(f"| {first} | " + " | ".join(f"{b:,} chars" for b in BUDGETS) + (" | mean |" if mean else " |"))
    print("|---|" + ("---:|" if mean else "---|") * (len(BUDGETS) + mean))


def tune_half(
    lists: Lists, tune: list[int], report: list[int], retrievers: Sequence[str], top: int
) -> Choice:
    """Score the grid on the tune half, print the best `top`, choose; a choice fusing a third list is
    kept only if that list passes the issue's test on both halves (module docstring, step 3)."""
    old, grid = old_default(retrievers), candidates(retrievers)
    scored = {c: recall_grid(lists, tune, c, BUDGETS) for c in grid}
    chosen = choose(scored, old)
    print(f"\n### tune half ({len(tune)} questions): {len(grid)} candidates, recall (%) at "
          + " / ".join(f"{b:,}" for b in BUDGETS) + " characters and their mean\n")  # fmt: skip
    _table_head("fusion")
    ordered = sorted(scored, key=lambda c: -scored[c].mean())
    for c in ordered[:top]:
        print(_row(c.label() + (" **(chosen)**" if c == chosen else ""), scored[c]))
    for name in retrievers:
        print(_row(f"{name} alone", recall_grid(lists, tune, name, BUDGETS)))
    print(_row(f"old default: {old.label()}", scored[old]))
    if chosen not in ordered[:top]:
        print(_row(f"{chosen.label()} **(chosen)**", scored[chosen]))
    for method in ("rrf", "minmax", "zscore"):
        best = max((c for c in grid if c.method == method), key=lambda c: scored[c].mean())
        print(f"- best {method}: {best.label()}: mean {_pct(scored[best].mean())}")
    print(f"- chosen (best mean; within {100 * TIE:g} points of it, fewest changes from the old default): "
          f"{chosen.label()}")  # fmt: skip
    if not uses_extra(chosen):
        return Choice(old, chosen)
    bare, extra = without_extra(chosen), ", ".join(retrievers[2:])
    passed = []
    for half, rows in (("tune", tune), ("report", report)):
        gain = recall_grid(lists, rows, chosen, BUDGETS).mean(axis=0) - recall_grid(
            lists, rows, bare, BUDGETS
        ).mean(axis=0)
        passed.append(adds_and_costs_none(gain))
        print(f"- {extra} in it, {half} half: " + " / ".join(f"{100 * g:+.1f}" for g in gain)
              + f" points against the same fusion without ({'adds, costs none' if passed[-1] else 'costs'})")  # fmt: skip
    if all(passed):
        return Choice(old, chosen)
    default = choose({c: v for c, v in scored.items() if not uses_extra(c)}, old)
    print(f"- so {extra} stays an option (issue 27: it must add recall at one budget and cost none at any, and "
          f"the reported half is where the targets are judged); the default is chosen on the tune half among "
          f"the fusions without it: {default.label()}")  # fmt: skip
    return Choice(old, default, chosen)


def report_half(lists: Lists, report: list[int], choice: Choice, retrievers: Sequence[str],
                base: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:  # fmt: skip
    """Print the report half: ours beside every baseline, the paired differences, the verdict against
    the issue's targets; ours' per-question recall on GRID, by label."""
    ours = {f"{name} alone": recall_grid(lists, report, name, GRID) for name in retrievers}
    ours.update({label: recall_grid(lists, report, c, GRID) for label, c in choice.labelled()})
    print(f"\n### report half ({len(report)} questions, never used to choose a constant): recall (%) at "
          + " / ".join(f"{b:,}" for b in BUDGETS) + " characters\n")  # fmt: skip
    _table_head("ranking")
    for label, arr in ours.items():
        print(_row(label, arr[:, IDX]))
    for label, arr in base.items():
        print(_row(f"**{label}** (baseline)", arr[:, IDX]))
    print("| issue 27 target | " + " | ".join(_pct(TARGETS[b]) for b in BUDGETS) + " | |")
    mine = ours[choice.labelled()[-1][0]][:, IDX]
    print("\n### report half, paired by question: the chosen fusion minus ...")
    print(
        "(mean difference in points, [95 % bootstrap CI], wins/losses/ties, sign-test p; * = CI excludes 0)\n"
    )
    _table_head("vs", mean=False)
    for label, _ in choice.labelled()[:-1]:
        print(_paired(label.split(" (")[0], mine, ours[label][:, IDX]))
    bests = []
    for j, budget in enumerate(BUDGETS):
        if base:
            label = max(base, key=lambda lb: base[lb][:, IDX[j]].mean())
            bests.append((label, float(base[label][:, IDX[j]].mean())))
            print(_paired(f"best baseline at {budget:,}: {label}", mine, base[label][:, IDX]))
    print("\n### verdict (issue 27 targets, report half)\n")
    means = mine.mean(axis=0)
    for j, budget in enumerate(BUDGETS):
        line = f"- {budget:,} chars: {_pct(means[j])} % (target {_pct(TARGETS[budget])}: " + (
            "met" if means[j] >= TARGETS[budget] - 1e-9 else "NOT met") + ")"  # fmt: skip
        if bests:
            label, value = bests[j]
            lead = means[j] - value
            line += (f"; {100 * lead:+.1f} points on the best baseline there ({label}, {_pct(value)}): lead of "
                     f"{100 * LEAD:g} {'met' if lead >= LEAD - 1e-9 else 'NOT met'}")  # fmt: skip
        print(line)
    return ours


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, help="directory of corpus files (default: the eval data's)")
    parser.add_argument("--questions", type=Path, help="questions CSV (default: the eval data's)")
    parser.add_argument("--retrievers", default="keywords,vectors", help="the ranked lists fused, in order")
    parser.add_argument("--lists", type=Path, default=Path(".unichunk") / "fusion_lists.json",
                        help="where the ranked lists are cached")  # fmt: skip
    parser.add_argument("--refresh", action="store_true", help="rank again even if the cache matches")
    parser.add_argument("--cache-dir", default=str(Path(".unichunk") / "bench_embeddings"),
                        help="on-disk embedding cache ('' to disable)")  # fmt: skip
    parser.add_argument("--no-baselines", action="store_true", help="skip the baselines on the report half")
    parser.add_argument("--plots-dir", default=str(Path("benchmarks") / "results"),
                        help="where the report half's plot is written ('' to skip)")  # fmt: skip
    parser.add_argument("--top", type=int, default=15, help="tune-half candidates printed")
    parser.add_argument("--model-input", choices=("segments", "chunks"), default=None,
                        help="what MiniLM and spaCy read of auto's chunks (default: as shipped, segments); "
                        "the baselines' chunks are always read whole")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    retrievers = [r.strip() for r in args.retrievers.split(",") if r.strip()]
    corpora_dir = args.corpora or evaldata.corpora_dir("fusion_tuning")
    questions_file = args.questions or evaldata.questions_file("fusion_tuning")
    cache = Path(args.cache_dir) if args.cache_dir else None
    questions = load_questions(questions_file, load_corpora(corpora_dir))  # checked, in file order
    parsed = read_questions(questions_file)  # the same order; the halves by the shipped split
    position = {q.id: i for i, q in enumerate(parsed)}
    tune, report = ([position[q.id] for q in half] for half in split_halves(parsed))
    key = lists_key(corpora_dir, questions_file, retrievers, args.model_input)
    lists = None if args.refresh else Lists.load(args.lists, key, questions)
    if lists is None:
        lists = build_lists(corpora_dir, questions, retrievers, cache, args.model_input)
        lists.save(args.lists, key)
    print(f"auto's chunks read by the models as {model_input(False, args.model_input)} (model_input); "
          "the baselines' whole")  # fmt: skip

    choice = tune_half(lists, tune, report, retrievers, args.top)
    now = shipped(retrievers)
    same = (now.method, now.rrf_k, now.weights) == (
        choice.chosen.method,
        choice.chosen.rrf_k,
        choice.chosen.weights,
    )
    print(f"- `RetrievalSettings` ships: {now.label().replace(f'; {HITS} candidates', '')}"
          + (" (= the chosen)" if same else " (NOT the chosen)"))  # fmt: skip
    base: dict[str, np.ndarray] = {}
    if not args.no_baselines:
        with retrieval_quality._truncation_warnings_off():
            results = retrieval_quality.run(
                corpora_dir, questions_file, False, cache, "auto", half="report", ours_input=args.model_input
            )
        base = dict(baseline_rows(results))
        stores = results.strict[(results.configs[0], "hybrid", "chars")][:, IDX, 0].mean(axis=0)
        offline = recall_grid(lists, report, now, BUDGETS).mean(axis=0)
        agree = "the same as" if np.allclose(stores, offline) else "NOT the same as"
        print(f"\nretrieval_quality's hybrid row for auto (the shipped defaults, ranked by the stores): "
              f"{' / '.join(map(_pct, stores))}, {agree} these lists fused offline the same way")  # fmt: skip
    ours = report_half(lists, report, choice, retrievers, base)
    every = list(range(len(questions)))
    print(f"\n### all {len(questions)} questions (what `unichunk eval` reproduces; not a held-out figure)\n")
    _table_head("ranking")
    for label, rank in choice.labelled():
        print(_row(label, recall_grid(lists, every, rank, BUDGETS)))
    if args.plots_dir:
        chosen_label = choice.labelled()[-1][0]
        print(
            f"plot: {write_plot(ours, base, chosen_label, Path(args.plots_dir) / 'fusion_report_half.png')}"
        )
    print(f"\n{len(questions)} questions in {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
