"""The shared web helpers: one reason-phrase table, one HTML-to-text reading used by judge and probe."""

from __future__ import annotations

from ego2web_replay.judge.pages import html_to_text as judge_text
from ego2web_replay.replay.httputil import reason_phrase as replay_reason
from ego2web_replay.tracking.probe import visible_text
from ego2web_replay.web import html_to_text, reason_phrase

PAGE = ("<html><head><title>Acme</title><style>p{}</style><meta name=x content=y></head><body>"
        "<h1>Kettle</h1><p>Price:  <b>$20</b></p><script>var hidden = 1</script>"
        "<svg><text>icon</text></svg><ul><li>blue</li><li>red</li></ul></body></html>")


def test_reason_phrase_with_and_without_fallback() -> None:
    assert reason_phrase(404) == reason_phrase(404, fallback=False) == "Not Found"
    assert (reason_phrase(299), reason_phrase(299, fallback=False)) == ("Success", "")
    assert (reason_phrase(799), reason_phrase(799, fallback=False)) == ("Unknown", "")
    assert replay_reason is reason_phrase


def test_one_html_reading_for_judge_and_probe() -> None:
    assert html_to_text(PAGE) == "Acme\nKettle\nPrice: $20\nblue\nred"
    assert judge_text is html_to_text
    assert visible_text(PAGE.encode(), "text/html; charset=utf-8") == "Acme Kettle Price: $20 blue red"
    assert visible_text(b"{\"a\": 1}", "application/json") == "{\"a\": 1}"
