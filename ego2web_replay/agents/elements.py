"""A compact list of the page's visible interactive elements, for LLM agents."""

from __future__ import annotations

from typing import Any

__all__ = ["list_elements", "ELEMENTS_JS"]

# Marks each visible interactive element with data-e2w-id so that an agent can
# name it by number; returns [{id, tag, role, text, href, type, x, y}].
ELEMENTS_JS = r"""
(limit) => {
  const sel = 'a[href], button, input, textarea, select, [role=button], [role=link], [onclick], summary';
  const out = [];
  let n = 0;
  for (const el of document.querySelectorAll(sel)) {
    const r = el.getBoundingClientRect();
    const st = getComputedStyle(el);
    if (r.width < 1 || r.height < 1 || st.visibility === 'hidden' || st.display === 'none') continue;
    n += 1;
    el.setAttribute('data-e2w-id', String(n));
    const text = (el.innerText || el.value || el.getAttribute('aria-label') || el.getAttribute('placeholder')
                  || el.getAttribute('alt') || '').trim().replace(/\s+/g, ' ').slice(0, 80);
    out.push({id: n, tag: el.tagName.toLowerCase(), role: el.getAttribute('role') || '', text,
              href: el.getAttribute('href') || '', type: el.getAttribute('type') || '',
              x: Math.round(r.x + r.width / 2), y: Math.round(r.y + r.height / 2)});
    if (out.length >= limit) break;
  }
  return out;
}
"""


def list_elements(page: Any, limit: int = 60) -> list[dict[str, Any]]:
    """Visible interactive elements, numbered; click one with selector ``[data-e2w-id="N"]``."""
    try:
        return list(page.evaluate(ELEMENTS_JS, limit))
    except Exception:  # noqa: BLE001 - a page mid-navigation has no elements to offer
        return []
