"""The change classifier on hand-written captures: soft 404s, CAPTCHA walls against pages that mention
CAPTCHA, access refusals, and volatile content that must not count as a change."""

from __future__ import annotations

import json

from ego2web_replay.tracking.changes import Response, classify, normalize_text
from ego2web_replay.tracking.pagefacts import page_facts

HTML = (("Content-Type", "text/html; charset=utf-8"),)
JSON = (("Content-Type", "application/json"),)


def page(title: str, body: str, *, status: int = 200, url: str = "https://shop.test/item/4",
         headers: tuple[tuple[str, str], ...] = HTML) -> Response:
    doc = (f"<!doctype html><html><head><title>{title}</title><meta name='csrf-token' content='x'></head><body>"
           f"<nav><a href='/'>Home</a> <a href='/shop'>Shop</a></nav><main>{body}</main></body></html>")
    return Response(url=url, status=status, headers=headers, body=doc.encode())


ITEM = page("Crunchy Corn Snack", "<h1>Crunchy Corn Snack</h1><p>150 kcal per serving</p><p>Price $3.49</p>"
            "<p>Made from roasted corn, sea salt and sunflower oil. A customer favourite since 2019.</p>")
NOT_FOUND = normalize_text(page_facts(page("Not found", "<h1>Sorry, we could not find that page</h1>"
                                           "<p>Try the search box or go back home.</p>").text()).text)


def test_soft_404_recognised_against_the_sites_not_found_page():
    soft = page("Not found", "<h1>Sorry, we could not find that page</h1><p>Try the search box or go back home.</p>")
    c = classify(ITEM, soft, not_found=[NOT_FOUND])
    assert c.status == "gone" and "soft 404" in c.detail
    # the same short page is merely changed when the site's not-found page looks different
    other = normalize_text("Error 404 This page does not exist at all anymore sorry")
    assert classify(ITEM, soft, not_found=[other]).status == "changed"
    assert classify(ITEM, page("x", "<p>gone</p>", status=404)).status == "gone"
    assert classify(ITEM, page("x", "<p>gone</p>", status=410)).status == "gone"


def test_captcha_wall_is_blocked_but_a_page_mentioning_captcha_is_not():
    wall = page("Verify you are human", '<div class="captcha"><h1>Verify you are human</h1>'
                "<p>Complete the CAPTCHA to continue.</p></div>")
    c = classify(ITEM, wall)
    assert c.status == "blocked" and "challenge" in c.detail
    turnstile = page("Just a moment...", '<div class="main"><script src="https://challenges.cloudflare.com/turnstile/'
                     'v0/api.js"></script><p>Checking the connection.</p></div>')
    assert classify(ITEM, turnstile).status == "blocked"
    # an article that mentions CAPTCHA, before and after an edit: changed, never blocked
    article = page("Spam filters", "<h1>Spam filters</h1><p>Many forms ask for a CAPTCHA to keep bots out.</p>"
                   "<p>Verify you are human is a common prompt.</p>")
    edited = page("Spam filters", "<h1>Spam filters</h1><p>Many forms ask for a CAPTCHA or a turnstile to keep "
                  "bots out.</p><p>Verify you are human is a common prompt.</p>")
    assert classify(article, edited).status == "changed"
    # a product page whose review newly mentions a captcha: changed
    reviewed = page("Crunchy Corn Snack", "<h1>Crunchy Corn Snack</h1><p>150 kcal per serving</p><p>Price $3.49</p>"
                    "<p>Made from roasted corn, sea salt and sunflower oil. A customer favourite since 2019.</p>"
                    "<p>Review: the site asked me for a CAPTCHA at checkout.</p>")
    assert classify(ITEM, reviewed).status == "changed"


def test_access_denied_by_the_response():
    denied = page("Access Denied", "<h1>Access Denied</h1><p>Reference #18.2f</p>", status=403)
    assert classify(ITEM, denied).status == "blocked"
    api_old = Response("https://shop.test/api/price/4", 200, JSON, b'{"price": "$3.49"}')
    assert classify(api_old, Response(api_old.url, 429, JSON, b'{"error": "slow down"}')).status == "blocked"
    challenge = Response(api_old.url, 200, (("Content-Type", "text/html"), ("cf-mitigated", "challenge")), b"<p>hi</p>")
    assert classify(api_old, challenge).status == "blocked"


def test_volatile_content_does_not_count():
    a = page("Results", "<h1>Results</h1><p>Queries took 12 ms</p><p>Page generated 2026-03-01 10:12:01</p>"
             "<p>Updated 5 minutes ago</p><div class='ad-banner'>Buy shoes now</div><p>Red Ceramic Mug</p>")
    b = page("Results", "<h1>Results</h1><p>Queries took 48 ms</p><p>Page generated 2026-03-09 17:40:55</p>"
             "<p>Updated 2 hours ago</p><div class='ad-banner'>Cheap flights to Rome</div><p>Red Ceramic Mug</p>")
    c = classify(a, b)
    assert c.status == "unchanged" and c.volatile_only
    old = Response("https://shop.test/api/price/7", 200, JSON,
                   json.dumps({"price": "$12.99", "server_time": 1764500000, "csrf_token": "a1", "took": 3}).encode())
    new = Response(old.url, 200, JSON,
                   json.dumps({"price": "$12.99", "server_time": 1764600000, "csrf_token": "b2", "took": 9}).encode())
    assert classify(old, new).status == "unchanged"
    moved = Response(old.url, 200, JSON, json.dumps({"price": "$14.49", "server_time": 1764600001}).encode())
    c = classify(old, moved)
    assert c.status == "changed" and [(f.path, f.old, f.new) for f in c.fields] == [("price", "$12.99", "$14.49")]
    # a real change next to volatile content still counts
    d = page("Results", "<h1>Results</h1><p>Queries took 7 ms</p><p>Page generated 2026-03-09 17:40:55</p>"
             "<p>Updated 2 hours ago</p><div class='ad-banner'>x</div><p>Blue Water Bottle</p>")
    c = classify(a, d)
    assert c.status == "changed" and c.removed == ["Red Ceramic Mug"] and c.added == ["Blue Water Bottle"]


def test_new_and_redirect_home():
    assert classify(None, ITEM).status == "new"
    home = Response(ITEM.url, 302, (("Location", "/"),), b"")
    assert classify(ITEM, home).status == "gone"


def test_markup_only_redesign_is_unchanged():
    a = page("Basil", "<h1>Basil</h1><table><tr><td>Family: Lamiaceae</td></tr></table><p>A herb.</p>")
    b = page("Basil", "<article><h1>Basil</h1><dl><dt>Family:</dt><dd>Lamiaceae</dd></dl><div>A herb.</div></article>")
    c = classify(a, b)
    assert c.status == "unchanged" and "markup" in c.detail
    reworded = page("Basil", "<article><h1>Basil</h1><p>Basil belongs to the Lamiaceae.</p><p>A herb.</p></article>")
    assert classify(a, reworded).status == "changed"


def test_soft_404_on_a_site_whose_layout_outweighs_its_content():
    # the site's not-found page is known, but the captured page is like it too (a long navigation, a few
    # words of content), so the known page cannot tell: the live page's "404" heading does
    nav = "".join(f"<li><a href='/p{i}/'>Chapter {i} of the handbook</a></li>" for i in range(12))

    def docs(title: str, main: str) -> Response:
        return page(title, f"<ul>{nav}</ul>{main}", url="https://docs.test/coverage/")

    old = docs("Coverage - Handbook", "<h1>Coverage</h1><p>Grow a snapshot by merging live runs.</p>")
    new = docs("Handbook", "<h1>404</h1><p><strong>Page not found</strong></p>")
    reference = normalize_text(page_facts(new.text()).text)
    c = classify(old, new, not_found=[reference])
    assert c.status == "gone" and 'not-found page ("404")' in c.detail
    # a page of the same site whose content merely changed is not gone
    edited = docs("Coverage - Handbook", "<h1>Coverage</h1><p>Grow a snapshot by merging many live runs.</p>")
    assert classify(old, edited, not_found=[reference]).status == "changed"
