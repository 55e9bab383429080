"""A CORS answer that names one page is served only to a fetch from that page, in Chromium.

An API echoes the requesting page in ``Access-Control-Allow-Origin`` (with ``Vary: Origin``); the
recording fetched it from two shops, first ``a.example`` and then ``b.example``. An agent off the
recorded path visits them the other way round. The sequence alone would hand ``b``'s fetch the answer
made for ``a``, which Chromium refuses to let the page read, while the log said it was an exact hit.
Each fetch gets the answer naming its own page; a page no answer names is a counted miss.
"""

from __future__ import annotations

from datetime import datetime

from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter

API = "https://api.example/prices"
PAGE = b"""<!doctype html><title>shop</title><body><script>
fetch('https://api.example/prices').then(r => r.json()).then(j => { document.body.dataset.got = j.for; })
  .catch(e => { document.body.dataset.got = 'refused'; });
</script></body>"""


def _snapshot(root):
    sw = SnapshotWriter(root, "cors")
    html = [("Content-Type", "text/html")]
    exchanges = [("https://a.example/", [], html, PAGE), ("https://b.example/", [], html, PAGE),
                 ("https://c.example/", [], html, PAGE)]
    for shop in ("a", "b"):  # the API, as the recording fetched it: from a, then from b
        origin = f"https://{shop}.example"
        exchanges.append((API, [("Origin", origin)], [("Content-Type", "application/json"),
                                                      ("Access-Control-Allow-Origin", origin), ("Vary", "Origin")],
                          b'{"for": "%s"}' % shop.encode()))
    for i, (url, req, head, body) in enumerate(exchanges):
        sw.writer.write_exchange(url=url, method="GET", request_headers=req, request_body=b"", status=200,
                                 reason="OK", response_headers=head, response_body=body,
                                 date=datetime(2026, 12, 1, 12, 0, i))
    sw.finalize()
    return sw.path


def test_a_cors_answer_goes_only_to_the_page_it_names(chromium, ca, tmp_path):
    snap = _snapshot(tmp_path)
    with Replay([snap], ca=ca) as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url)
        got = {}
        for shop in ("b", "a", "c"):  # not the recorded order, and a page never recorded fetching it
            page = ctx.new_page()
            page.goto(f"https://{shop}.example/")
            page.wait_for_selector("body[data-got]", state="attached", timeout=20_000)
            got[shop] = page.evaluate("() => document.body.dataset.got")
            page.close()
        ctx.close()
    assert got == {"b": "b", "a": "a", "c": "refused"}
    stats = replay.stats()
    api_misses = [u for u in stats.missed_urls if "favicon" not in u]
    assert api_misses == [f"GET {API}"] and stats.validity != "complete"  # c's fetch: counted
