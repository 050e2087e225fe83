"""`k3diag check`'s one-line formats count the inputs it could not use in words."""

from __future__ import annotations

from k3diag.render.check_formats import headline, unknown_reason
from k3diag.exit_codes import EXIT_OK


def _nothing_read(count: int) -> dict:
    inputs = [{"path": f"/saved/in{i}.txt", "format": "unknown", "warnings": ["no known tool output in it"]}
              for i in range(count)]
    return {"verdict": {"text": "Nothing could be analyzed (see Inputs)"}, "inputs": inputs}


def test_the_other_unread_inputs_are_counted_singular_and_plural() -> None:
    assert unknown_reason(_nothing_read(2)) == ("Nothing could be analyzed: /saved/in0.txt: no known tool output in "
                                                "it (and 1 more input not used)")
    assert unknown_reason(_nothing_read(3)).endswith("(and 2 more inputs not used)")


def test_a_clean_node_tallies_in_words() -> None:
    assert headline({"findings": [{"severity": "info", "id": "x"}]}, EXIT_OK) == (
        "no failure or warning (0 failures, 0 warnings)")
