"""The spaCy extractor tags only the chunks that need it, and gives what the full pipeline gives.

`SpacyExtractor` finds sentences and entities in every chunk, then runs tok2vec, tagger, attribute_ruler and
lemmatizer only on chunks where two entities share a sentence (relation keywords read POS and lemmas). The
reference here is the plain `nlp.pipe` with every loaded component, read by the same `_from_doc`.
"""

from __future__ import annotations

from unichunk.chunking.ids import make_chunk_id, sha256_hex
from unichunk.chunking.models import Chunk
from unichunk.sinks.graph.extraction import KEYWORD_PIPES, SpacyExtractor, deferred_pipes, load_spacy

TEXTS = [
    "Apple Inc. hired Tim Cook in California. The weather was nice.",
    "Tim O'Reilly met Zoë Müller in Berlin. Zoë Müller lives in Berlin and works for Siemens.",
    "Nothing named here at all, only lowercase prose about ownership and borrowing.",
    "Mozilla sponsored Rust. Graydon Hoare started it; Mozilla Research announced it in 2010 in Toronto.",
    "Barack Obama visited Paris.",  # one sentence, a pair: tagged
    "Microsoft shipped Windows.",
    "Ferris is the mascot. Cargo downloads crates from crates.io in the United States.",
]


def _chunks() -> list[Chunk]:
    return [
        Chunk(
            chunk_id=make_chunk_id("doc_stages", i, text),
            document_id="doc_stages",
            chunk_index=i,
            content=text,
            start_char=0,
            end_char=len(text),
            token_count=len(text.split()),
            content_hash=sha256_hex(text),
        )
        for i, text in enumerate(TEXTS)
    ]


def test_staged_extraction_equals_the_full_pipeline() -> None:
    extractor = SpacyExtractor(batch_size=2)  # several batches in each stage
    chunks = _chunks()
    nlp = load_spacy(extractor.model)
    assert deferred_pipes(nlp) == list(KEYWORD_PIPES)  # en_core_web_sm: NER embeds for itself
    assert "parser" not in nlp.pipe_names and "senter" in nlp.pipe_names

    full = [extractor._from_doc(c.chunk_id, doc) for c, doc in zip(chunks, nlp.pipe(TEXTS), strict=True)]
    staged = extractor.extract(chunks)
    assert staged == full
    keywords = {r.keywords for x in staged for r in x.relations}
    assert "hire" in keywords  # a verb lemma: POS and lemmas were there where a pair needed them


def test_only_chunks_naming_a_pair_are_tagged() -> None:
    extractor = SpacyExtractor()
    nlp = load_spacy(extractor.model)
    docs = list(nlp.pipe(TEXTS, disable=list(KEYWORD_PIPES)))
    paired = [extractor._names_a_pair(doc) for doc in docs]
    assert paired[0] and paired[1] and paired[4] and paired[5]
    assert not paired[2]
    assert all(not token.pos_ for token in docs[0])  # the first stage leaves POS unset
