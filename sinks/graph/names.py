"""What an entity's name says about which entity it is: the pure functions both sides of the graph share.

The write side (entity resolution) and the read side (the graph retriever's look-up of the names a query
mentions) must turn "IBM's", "Dr. Okafor" and "International Business Machines" into keys the same way, so
these live once, here, and depend on nothing but the name and its type:

- `base_key`: `entity_key` after dropping a possessive ("IBM's") and, for a person, titles, honorifics and
  suffixes ("Dr.", "Mrs", "Jr."), and writing a dotted acronym without its dots ("U.S.A." -> "usa");
- `alias_key`: the second key an entity is found by, indexed beside `name`: a person's surname ("margaret
  okafor" -> "okafor"), or the initials of a name of several words ("international business machines" ->
  "ibm"). It is a look-up key, not a merge: two Okafors in two documents share it and stay two entities;
- `spellings`: the keys a name someone typed may be stored under (the look-ups of an entity by name);
- `type_class`, `looks_like_acronym`: what entity resolution (`unichunk.sinks.graph.resolution`) asks
  before it merges a short name into a long one of the same document.
"""

from __future__ import annotations

import re

from unichunk.sinks.graph.extraction import display_name, entity_key

PERSON = "PERSON"
# Types an acronym can stand for (spaCy's labels, and the LLM extractor's default types upper-cased).
NAMED_GROUPS = frozenset(
    {"ORG", "GPE", "LOC", "NORP", "FAC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW"}
    | {"ORGANIZATION", "ORGANISATION", "LOCATION"}
)
# Types that name the same kind of thing to resolution: NER tags an acronym and its long form
# inconsistently within these ("the EU" ORG, "the European Union" ORG or GPE), never across them.
TYPE_CLASSES = {
    "ORG": "ORG",
    "ORGANIZATION": "ORG",
    "ORGANISATION": "ORG",
    "NORP": "ORG",
    "GPE": "PLACE",
    "LOC": "PLACE",
    "LOCATION": "PLACE",
    "FAC": "PLACE",
}
# Words before or after a person's name that are not the name (casefolded, without their full stop).
TITLES = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "miss",
        "mx",
        "dr",
        "prof",
        "professor",
        "sir",
        "dame",
        "lord",
        "lady",
        "rev",
        "reverend",
        "fr",
        "father",
        "sister",
        "brother",
        "president",
        "vice",
        "senator",
        "sen",
        "rep",
        "representative",
        "gov",
        "governor",
        "gen",
        "general",
        "col",
        "colonel",
        "capt",
        "captain",
        "lt",
        "lieutenant",
        "sgt",
        "sergeant",
        "maj",
        "major",
        "adm",
        "admiral",
        "judge",
        "justice",
        "mayor",
        "minister",
        "chancellor",
        "secretary",
        "chairman",
        "chairwoman",
        "chair",
        "ceo",
        "king",
        "queen",
        "prince",
        "princess",
        "pope",
        "bishop",
        "rabbi",
        "imam",
        "st",
        "saint",
    ]
)
SUFFIXES = frozenset({"jr", "sr", "ii", "iii", "iv", "phd", "md", "esq", "qc", "kc"})
# Words an acronym skips ("Bank of England" -> "be", as "BoE" is written).
LINKING_WORDS = frozenset({"of", "the", "and", "for", "&", "de", "du", "la", "le", "von", "van", "a", "an"})
_POSSESSIVE = re.compile(r"(?:['’]s|(?<=s)['’])$", re.IGNORECASE)
_DOTTED_ACRONYM = re.compile(r"^(?:[^\W\d_]\.){2,}[^\W\d_]?\.?$")


def strip_possessive(name: str) -> str:
    """ "IBM's" -> "IBM", "Okafor’s" -> "Okafor", "the Joneses'" -> "the Joneses"."""
    return _POSSESSIVE.sub("", name.strip())


def _is_person(entity_type: str | None) -> bool:
    return (entity_type or "").upper() == PERSON


def person_words(name: str) -> list[str]:
    """The words of a person's key without titles before it or suffixes after it (never all of them)."""
    words = entity_key(name).replace(".", " ").replace(",", " ").split()
    start, end = 0, len(words)
    while start < end - 1 and words[start] in TITLES:
        start += 1
    while end > start + 1 and words[end - 1] in SUFFIXES:
        end -= 1
    return words[start:end]


def base_key(name: str, entity_type: str | None = None) -> str:
    """The key an entity is stored under: `entity_key` of the name without a possessive, a dotted acronym
    without its dots, for a PERSON without titles and suffixes ("Dr. Margaret Okafor Jr." -> "margaret
    okafor"), and for anything else without a leading "the" ("the World Health Organization", as NER
    often spans it, is "world health organization")."""
    shown = strip_possessive(display_name(name))
    if _DOTTED_ACRONYM.match(shown):
        shown = shown.replace(".", "")
    if _is_person(entity_type):
        return " ".join(person_words(shown))
    key = entity_key(shown)
    first, _, rest = key.partition(" ")
    return rest if first == "the" and rest else key


def acronym(key: str) -> str | None:
    """The initials of a key of two or more words, linking words skipped ("bank of england" -> "be");
    None for a single word."""
    words = [w for w in key.replace("-", " ").split() if w not in LINKING_WORDS]
    if len(words) < 2:
        return None
    return "".join(w[0] for w in words)


def alias_key(key: str, entity_type: str | None = None) -> str | None:
    """The second key an entity is looked up by: a person's surname (the last word of a name of two or
    more), the initials of a named group of several words; None when the name has no shorter form."""
    words = key.split()
    if len(words) < 2:
        return None
    if _is_person(entity_type):
        return words[-1]
    if (entity_type or "").upper() in NAMED_GROUPS:
        return acronym(key)
    return None


def type_class(entity_type: str | None) -> str:
    """The kind of thing a type names, for deciding whether two names may be one entity: ORG-like and
    place-like types each form one class, every other type (PERSON included) is a class of its own."""
    upper = (entity_type or "").upper()
    return TYPE_CLASSES.get(upper, upper)


def looks_like_acronym(name: str) -> bool:
    """Whether a single-word name is written as an acronym: dotted ("I.B.M.") or with two capitals or
    more ("IBM", "BoE"); "Ibm" or "apple" are ordinary words, never resolved to a longer name."""
    shown = strip_possessive(display_name(name))
    if not shown or " " in shown:
        return False
    return bool(_DOTTED_ACRONYM.match(shown)) or sum(ch.isupper() for ch in shown) >= 2


def spellings(name: str) -> list[str]:
    """The keys a name a caller typed may be stored under, most literal first: `entity_key`, then the
    write side's `base_key` (possessive, dotted acronym, a leading "the"), then as a person's name
    (titles and suffixes dropped). Any text gives keys a store accepts: `display_name` turns control
    characters, NUL and lone surrogates included, into spaces."""
    return [k for k in dict.fromkeys((entity_key(name), base_key(name), base_key(name, PERSON))) if k]
