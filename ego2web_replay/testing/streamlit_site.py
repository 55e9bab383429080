"""Streamlit (PyPI ``streamlit``) on 127.0.0.1: an app that draws nothing without its websocket.

:class:`StreamlitSite` writes a small app script and runs ``streamlit run`` on it as its
own process. The page Streamlit serves is an empty shell; every element (title, text,
table) comes over the websocket ``/_stcore/stream`` as protobuf messages, so a replay
that cannot play the websocket shows a blank page.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Self

from .thirdparty import AppProcess, _free_port

__all__ = ["StreamlitSite", "APP_TEXT", "CLICKED_TEXT"]

APP_TEXT = ("Walnut ledger", "Walnut coffee costs 12.50 today")
CLICKED_TEXT = "Ordered 2 bags of walnut coffee"

_APP = f'''import streamlit as st

st.title({APP_TEXT[0]!r})
st.write({APP_TEXT[1]!r})
st.table({{"item": ["walnut coffee", "oak table"], "price": [12.5, 240.0]}})
bags = st.number_input("Bags", min_value=1, max_value=9, value=1)
if st.button("Order"):
    st.write(f"Ordered {{bags}} bags of walnut coffee")
'''


class StreamlitSite(AppProcess):
    """``streamlit run`` of a small app on ``http://127.0.0.1:<port>/``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self.folder.mkdir(parents=True, exist_ok=True)
        app = self.folder / "app.py"
        app.write_text(_APP)
        self.port = _free_port()
        cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", "127.0.0.1",
               "--server.port", str(self.port), "--server.headless", "true", "--server.fileWatcherType", "none",
               "--browser.gatherUsageStats", "false", "--global.developmentMode", "false"]
        env = {**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", "HOME": str(self.folder)}
        self._launch(cmd, env, self.url + "/_stcore/health", 60, cwd=self.folder)
        return self
