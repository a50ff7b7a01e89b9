"""Entity and relation extraction by a chat model (OpenAI-compatible API), LightRAG style.

The model answers in LightRAG's delimiter format: records separated by `##`, fields by `<|>` (newer
LightRAG: `<|#|>`), ending with `<|COMPLETE|>`. Models get that format wrong in many small ways, so the
parser accepts what it can and logs and skips the rest: one bad line never loses a chunk's other records.
A failed HTTP call, by contrast, raises, so the pipeline writes nothing for the batch. The call and its
retries are `unichunk.sinks.openai_http`'s, the same as the OpenAI-compatible embedder's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from unichunk.chunking.ids import sha256_hex
from unichunk.chunking.models import Chunk
from unichunk.sinks.config import SinkSettings
from unichunk.sinks.graph.extraction import (
    EXTRACTION_VERSION,
    EntityExtractor,
    ExtractedEntity,
    ExtractedRelation,
    Extraction,
    ExtractionError,
    display_name,
    entity_key,
)
from unichunk.sinks.openai_http import OpenAICompatibleClient, OpenAIHTTPError, RetryPolicy

log = logging.getLogger(__name__)

TUPLE_DELIMITER = "<|>"
RECORD_DELIMITER = "##"
COMPLETION_DELIMITER = "<|COMPLETE|>"
DEFAULT_ENTITY_TYPES = ("organization", "person", "location", "event", "product", "concept")

SYSTEM_PROMPT = """You build a knowledge graph from text.
1. List every significant entity in the text. For each give: its name as written (capitalised), one type \
from [{types}], and a one-sentence description based only on the text. Format:
("entity"{td}<name>{td}<type>{td}<description>)
2. For every pair of listed entities that the text clearly relates, give: source name, target name, why they \
are related, a few comma-separated keywords summarising the relation, and a strength from 1 to 10. Format:
("relationship"{td}<source>{td}<target>{td}<description>{td}<keywords>{td}<strength>)
Separate records with {rd} on its own line. Write nothing else. Finish with {cd}

Example:
Text: Marie Curie worked at the University of Paris.
Output:
("entity"{td}Marie Curie{td}person{td}Marie Curie was a researcher at the University of Paris.)
{rd}
("entity"{td}University of Paris{td}organization{td}The University of Paris employed Marie Curie.)
{rd}
("relationship"{td}Marie Curie{td}University of Paris{td}Marie Curie worked at the University of \
Paris.{td}employment, research{td}8)
{cd}"""

_FIELD_SPLIT = re.compile(r"<\|#?\|>|<\|>")
# Records end at `##` or at a line break before the next record, so a description may span lines.
_RECORD_SPLIT = re.compile(
    r"##|\n(?=\s*\(?\s*[\"']?(?:entity|relationship|relation|content_keywords)\b)", re.I
)


def build_messages(text: str, entity_types: Iterable[str] = DEFAULT_ENTITY_TYPES) -> list[dict[str, str]]:
    """The chat messages asking for one chunk's entities and relations."""
    system = SYSTEM_PROMPT.format(
        types=", ".join(entity_types), td=TUPLE_DELIMITER, rd=RECORD_DELIMITER, cd=COMPLETION_DELIMITER
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Text:\n{text}\nOutput:"}]


def parse_extraction_output(text: str, chunk_id: str) -> Extraction:
    """Parse a model's delimiter-format answer; malformed records are logged and skipped, never raised."""
    text = text.split(COMPLETION_DELIMITER, 1)[0]  # anything after the end marker is chatter
    entities: dict[str, ExtractedEntity] = {}
    relations: dict[tuple[str, str], ExtractedRelation] = {}
    for raw in _RECORD_SPLIT.split(text):
        record = raw.strip().strip("`").strip()
        if not record or record in {"Output:", "```"}:
            continue
        if record.startswith("("):
            end = record.rfind(")")
            record = record[1:end] if end > 0 else record[1:]
        fields = [_clean_field(f) for f in _FIELD_SPLIT.split(record)]
        if len(fields) < 2:
            log.warning("LLM extraction, chunk %s: skipped a line without delimiters: %.200r", chunk_id, raw)
            continue
        kind = fields[0].lower()
        if kind == "entity" and len(fields) >= 3:
            name = display_name(fields[1])
            if not entity_key(name):
                log.warning(
                    "LLM extraction, chunk %s: skipped an entity without a name: %.200r", chunk_id, raw
                )
                continue
            entity_type = fields[2].upper().replace(" ", "_") or "UNKNOWN"
            description = fields[3] if len(fields) > 3 else ""
            entities.setdefault(entity_key(name), ExtractedEntity(name, entity_type, description, chunk_id))
        elif kind in {"relationship", "relation"} and len(fields) >= 3:
            source, target = display_name(fields[1]), display_name(fields[2])
            if not entity_key(source) or not entity_key(target) or entity_key(source) == entity_key(target):
                log.warning(
                    "LLM extraction, chunk %s: skipped a relation without two entities: %.200r", chunk_id, raw
                )
                continue
            description = fields[3] if len(fields) > 3 else ""
            keywords = fields[4] if len(fields) > 4 else ""
            weight = _parse_weight(fields[5] if len(fields) > 5 else "")
            pair = tuple(sorted((entity_key(source), entity_key(target))))
            known = relations.get(pair)  # type: ignore[arg-type]
            if known is not None:
                weight += known.weight
                description, keywords = known.description, known.keywords
            relations[pair] = ExtractedRelation(source, target, keywords, description, weight, chunk_id)  # type: ignore[index]
        elif kind in {"content_keywords", "keywords"}:
            continue  # LightRAG's optional high-level keywords record: not stored
        else:
            log.warning("LLM extraction, chunk %s: skipped an unrecognised record: %.200r", chunk_id, raw)
    return Extraction(chunk_id, tuple(entities.values()), tuple(relations.values()))


def _clean_field(value: str) -> str:
    value = value.strip()
    while len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'<>":
        value = value[1:-1].strip()
    value = value.strip("<>").strip() if value.startswith("<") and value.endswith(">") else value
    return value


def _parse_weight(value: str) -> float:
    match = re.search(r"\d+(?:\.\d+)?", value)
    if not match:
        return 1.0
    weight = float(match.group())
    return weight if weight > 0 else 1.0


class LLMExtractor(EntityExtractor):
    """Calls `{base_url}/chat/completions` once per chunk, a few chunks at a time."""

    name = "llm"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        entity_types: Sequence[str] = DEFAULT_ENTITY_TYPES,
        timeout: float = 120.0,
        max_concurrency: int = 4,
        retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ) -> None:
        self.model = model
        self.entity_types = tuple(entity_types)
        self.max_concurrency = max(1, max_concurrency)
        self._client = OpenAICompatibleClient(
            base_url, api_key, timeout=timeout, policy=RetryPolicy(retries, backoff, max_backoff)
        )

    @property
    def fingerprint(self) -> str:
        """The endpoint, the model, the entity types and the prompt (temperature is always 0)."""
        prompt = sha256_hex(build_messages("", self.entity_types)[0]["content"])[:16]
        return (
            f"llm|{self._client.url('chat/completions')}|{self.model}|{','.join(self.entity_types)}|"
            f"{prompt}|v{EXTRACTION_VERSION}"
        )

    @classmethod
    def from_settings(cls, settings: SinkSettings) -> LLMExtractor:
        if not settings.llm_base_url:
            raise ExtractionError("the llm extractor needs UNICHUNK_LLM_BASE_URL")
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return cls(settings.llm_base_url, settings.llm_model, key)

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        if not chunks:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(chunks))) as pool:
            return list(pool.map(self._extract_one, chunks))

    def _extract_one(self, chunk: Chunk) -> Extraction:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": build_messages(chunk.content, self.entity_types),
        }
        try:
            answer = self._client.post("chat/completions", body)
        except OpenAIHTTPError as exc:
            tries = f" (after {exc.attempts} attempts)" if exc.attempts > 1 else ""
            raise ExtractionError(
                f"LLM request for chunk {chunk.chunk_id} failed{tries}: {exc.problem}"
            ) from exc
        try:
            content = answer["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as exc:
            raise ExtractionError(f"LLM answer for chunk {chunk.chunk_id} is not a chat completion") from exc
        if not isinstance(content, str):
            raise ExtractionError(f"LLM answer for chunk {chunk.chunk_id} has no text content")
        return parse_extraction_output(content, chunk.chunk_id)

    def close(self) -> None:
        self._client.close()
