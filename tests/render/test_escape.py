"""Terminal escaping of input text: what the user sees instead of an escape sequence."""

from k3diag.render.escape import escape_terminal, for_rich, has_unsafe, safe_message


def test_escape_sequences_are_shown_not_sent() -> None:
    hostile = "gpu\x1b]0;pwned\x07name\x1b[2J\x9b31m"
    shown = escape_terminal(hostile)
    assert shown == "gpu\\x1b]0;pwned\\x07name\\x1b[2J\\x9b31m"
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown


def test_newlines_escaped_in_single_line_fields_kept_in_messages() -> None:
    assert escape_terminal("a\nFAKE: evidence\r") == "a\\nFAKE: evidence\\r"
    assert escape_terminal("a\nb", multiline=True) == "a\nb"
    assert safe_message("line one\nline\x1b[31m two") == "line one\nline\\x1b[31m two"
    assert escape_terminal("tab\tkept") == "tab\tkept"


def test_surrogates_and_bidi_marks_escaped_so_printing_cannot_fail() -> None:
    shown = escape_terminal("host\udcff\u202egnp.exe")
    assert shown == "host\\udcff\\u202egnp.exe"
    shown.encode("utf-8")  # a lone surrogate would raise here


def test_plain_text_is_returned_unchanged() -> None:
    text = "GPU0 NV12 0000:1b:00.0 — 80 GiB ✓"
    assert escape_terminal(text) is text
    assert not has_unsafe(text)


def test_rich_markup_escaped_after_controls() -> None:
    assert for_rich("[bold]x\x1b") == "\\[bold]x\\x1b"
