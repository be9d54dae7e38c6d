"""Every `quote:` of a seed study's findings occurs in its seed's text, in ../shared/seeds/ beside
the repository (as CI clones it; a worktree finds it further up): the quotes are the seed's words,
not a paraphrase."""

import re
import unicodedata
from pathlib import Path

import pytest

from vpnlab.plan.study import load_builtin

ROOT = Path(__file__).resolve().parents[1]
SEED_FILES = {  # study -> its seed's text (shared/seeds/INDEX.md)
    "small-business-2011": "000_d4eabbe2f6d67c46.txt",
    "narayan-2008": "001_c86a6654801faaf2.txt",
    "jaha-2014": "002_2b8b5246050135e6.txt",
    "fave-2018": "003_783cc12acc7c139d.txt",
    "taneja-2019": "004_64bdca5e977eac87.txt",
}


def seeds_dir() -> Path:
    """../shared/seeds from the repository's root, or from the nearest folder above it that has one."""
    for folder in ROOT.parents:
        if (folder / "shared" / "seeds" / "INDEX.md").is_file():
            return folder / "shared" / "seeds"
    pytest.fail(f"no shared/seeds/ beside {ROOT} or above it: the seeds' texts are needed to check the quotes")


def normalised(text: str) -> str:
    """Text as a reader compares it: one space for any whitespace, words split by a line-end hyphen
    joined, dashes and quotes of any kind alike, the markdown emphasis of the conversion dropped."""
    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"(\w)-\s*\n\s*(\w)", r"\1\2", text)
    text = re.sub(r"[\u2010-\u2015\u2212]", "-", text)
    text = re.sub(r"[\u2018\u2019\u201a\u2032]", "'", text)
    text = re.sub(r"[\u201c\u201d\u201e\u2033]", '"', text)
    text = text.replace("*", "")
    return re.sub(r"\s+", " ", text).strip()


def occurs(quote: str, text: str) -> bool:
    """The quote's parts (an ellipsis '...' leaves words out) occur in the text in order."""
    at = 0
    for part in (normalised(p) for p in quote.split("...")):
        if not part:
            continue
        found = text.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


@pytest.mark.parametrize("study", sorted(SEED_FILES))
def test_every_quote_occurs_in_the_seed(study):
    text = normalised((seeds_dir() / SEED_FILES[study]).read_text(encoding="utf-8"))
    quotes = [(f.id, f.quote) for f in load_builtin(study).findings]
    assert quotes, f"{study} lists no findings"
    missing = [f"{fid}: {quote!r}" for fid, quote in quotes if not occurs(quote, text)]
    assert not missing, "not in the seed's text:\n" + "\n".join(missing)


def test_a_quote_changed_by_one_word_is_not_found():
    """The check can fail: a real quote found, the same with one word changed not, nor its parts out
    of order around an ellipsis."""
    text = normalised((seeds_dir() / SEED_FILES["narayan-2008"]).read_text(encoding="utf-8"))
    real = "IPsec appears to use considerably less CPU when compared to other protocols"
    assert occurs(real, text)
    assert not occurs(real.replace("less", "more"), text)
    assert not occurs("when compared to other protocols ... IPsec appears to use", text)
    assert occurs("IPsec appears to ... other protocols", text)
